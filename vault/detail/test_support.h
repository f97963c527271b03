// Shared by the vault's tests: a fresh, initialized state directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "common/file_io.h"
#include "common/state_dir.h"
#include "vault/vault.h"

namespace cordon::vault::testing {

class TempState {
 public:
  TempState() {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("cordon-vault-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    state_.root = (dir_ / "state").string();
  }
  ~TempState() { std::filesystem::remove_all(dir_); }
  const StateDir& state() const { return state_; }
  std::filesystem::path dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  StateDir state_;
};

class VaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Vault::initialize(tmp_.state());
    ASSERT_TRUE(s) << s.error().message;
    auto v = Vault::open(tmp_.state(), options());
    ASSERT_TRUE(v) << v.error().message;
    vault_ = std::move(*v);
  }
  virtual Vault::Options options() { return {}; }
  std::unique_ptr<Vault> reopen() {
    auto v = Vault::open(tmp_.state(), options());
    EXPECT_TRUE(v) << v.error().message;
    return v ? std::move(*v) : nullptr;
  }
  const StateDir& state() const { return tmp_.state(); }

  TempState tmp_;
  std::unique_ptr<Vault> vault_;
};

// All bytes of the database and its WAL (to look for plaintext at rest).
inline std::string database_bytes(const StateDir& state) {
  std::string all;
  for (const std::string& p : {state.vault_db(), state.vault_db() + "-wal"}) {
    if (auto r = read_file(p)) all += *r;
  }
  return all;
}

}  // namespace cordon::vault::testing
