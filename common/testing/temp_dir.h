// TempDir: a fresh directory under the system temp dir for one test, removed with everything in
// it when the object goes away. Header-only, for tests and benchmarks (not part of a library).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace cordon::testing {

class TempDir {
 public:
  // `tag` names the owner in the directory name (cordon-<tag>-<pid>-<n>), for debugging leftovers.
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<int> counter{0};
    path_ = (std::filesystem::temp_directory_path() /
             ("cordon-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cordon::testing
