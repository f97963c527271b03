// Shared by the vault's tests: a fresh, initialized state directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <string_view>

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

// Shape checks (std::regex trips -Wmaybe-uninitialized in libstdc++ 12 under sanitizers).
inline bool all_of_class(std::string_view s, bool hex_only) {
  for (char c : s) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    bool b64 = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_';
    if (hex_only ? !hex : !b64) return false;
  }
  return true;
}
// "<prefix>_<16 lowercase hex>_<43 base64url>"
inline bool has_id_secret_shape(std::string_view s, std::string_view prefix) {
  return s.size() == prefix.size() + 61 && s.substr(0, prefix.size()) == prefix &&
         s[prefix.size()] == '_' && all_of_class(s.substr(prefix.size() + 1, 16), true) &&
         s[prefix.size() + 17] == '_' && all_of_class(s.substr(prefix.size() + 18), false);
}

// All bytes of the database and its WAL (to look for plaintext at rest).
inline std::string database_bytes(const StateDir& state) {
  std::string all;
  for (const std::string& p : {state.vault_db(), state.vault_db() + "-wal"}) {
    if (auto r = read_file(p)) all += *r;
  }
  return all;
}

}  // namespace cordon::vault::testing
