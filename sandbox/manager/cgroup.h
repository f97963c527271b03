// Reading and removing the cgroup of a sandbox, on cgroup v2 (unified) or v1 (one hierarchy per
// controller, as on hosts booted with the legacy layout). The backend's runtime creates the
// cgroup and applies its limits (OCI cgroupsPath + linux.resources); cordon only reads usage and
// removes what a crash left. Header-only so that backends and the manager share it unlinked.
#pragma once

#include <dirent.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cordon::sandbox::cgroup {

inline constexpr const char* kRoot = "/sys/fs/cgroup";

inline bool is_v2() {
  struct statfs s {};
  return statfs(kRoot, &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC;
}

// The directory of `path` ("/cordon/x") in the hierarchy holding `controller` ("memory",
// "cpuacct", "pids"); on v2 the one unified directory.
inline std::string dir(const std::string& controller, const std::string& path) {
  if (is_v2()) return std::string(kRoot) + path;
  return std::string(kRoot) + "/" + controller + path;
}

// Every directory of `path` in every hierarchy (v1: each controller's; v2: the one).
inline std::vector<std::string> all_dirs(const std::string& path) {
  std::vector<std::string> out;
  if (is_v2()) {
    out.push_back(std::string(kRoot) + path);
    return out;
  }
  if (DIR* d = opendir(kRoot)) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string full = std::string(kRoot) + "/" + n;
      struct stat st {};
      // Symlinks (cpu -> cpu,cpuacct) would list a hierarchy twice.
      if (lstat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(full + path);
    }
    closedir(d);
  }
  return out;
}

inline std::optional<std::string> read(const std::string& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::optional<uint64_t> read_u64(const std::string& file) {
  auto t = read(file);
  if (!t || t->empty() || !isdigit(static_cast<unsigned char>((*t)[0]))) return std::nullopt;
  return std::stoull(*t);
}

// Value of `key` in a flat "key value" file (memory.stat, cpu.stat).
inline std::optional<uint64_t> stat_value(const std::string& file, const std::string& key) {
  auto t = read(file);
  if (!t) return std::nullopt;
  std::istringstream in(*t);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return std::nullopt;
}

// CPU time used by the cgroup, in nanoseconds.
inline std::optional<uint64_t> cpu_usage_ns(const std::string& path) {
  if (is_v2()) {
    auto us = stat_value(dir("", path) + "/cpu.stat", "usage_usec");
    if (!us) return std::nullopt;
    return *us * 1000;
  }
  return read_u64(dir("cpuacct", path) + "/cpuacct.usage");
}

inline std::optional<uint64_t> memory_current(const std::string& path) {
  if (is_v2()) return read_u64(dir("", path) + "/memory.current");
  return read_u64(dir("memory", path) + "/memory.usage_in_bytes");
}

inline std::optional<uint64_t> memory_file_bytes(const std::string& path) {
  if (is_v2()) return stat_value(dir("", path) + "/memory.stat", "file");
  auto v = stat_value(dir("memory", path) + "/memory.stat", "total_cache");
  return v ? v : stat_value(dir("memory", path) + "/memory.stat", "cache");
}

inline std::vector<int> procs(const std::string& path) {
  std::vector<int> out;
  auto t = read(dir("pids", path) + "/cgroup.procs");
  if (!t) return out;
  std::istringstream in(*t);
  int pid = 0;
  while (in >> pid) out.push_back(pid);
  return out;
}

// Removes the (empty) cgroup directories of `path` in every hierarchy; true if none is left.
inline bool remove(const std::string& path) {
  bool ok = true;
  for (const auto& d : all_dirs(path)) {
    struct stat st {};
    if (stat(d.c_str(), &st) != 0) continue;
    if (rmdir(d.c_str()) != 0 && errno != ENOENT) ok = false;
  }
  return ok;
}

// Names of the child cgroups of `parent` ("/cordon") in any hierarchy, deduplicated.
inline std::vector<std::string> children(const std::string& parent) {
  std::vector<std::string> out;
  for (const auto& d : all_dirs(parent)) {
    DIR* dd = opendir(d.c_str());
    if (!dd) continue;
    while (dirent* e = readdir(dd)) {
      std::string n = e->d_name;
      if (n == "." || n == ".." || e->d_type != DT_DIR) continue;
      bool seen = false;
      for (const auto& o : out) seen = seen || o == n;
      if (!seen) out.push_back(n);
    }
    closedir(dd);
  }
  return out;
}

}  // namespace cordon::sandbox::cgroup
