#include "agent/filesystem/paths.h"

#include <vector>

namespace cordon::agent::filesystem {

std::string clean_absolute(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view seg = path.substr(i, j - i);
    if (seg.empty() || seg == ".") {
      // skip
    } else if (seg == "..") {
      if (!parts.empty()) parts.pop_back();  // ".." at the root stays at the root
    } else {
      parts.push_back(seg);
    }
    i = j + 1;
  }
  if (parts.empty()) return "/";
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out;
}

std::string base_name(std::string_view clean_path) {
  if (clean_path == "/") return "/";
  size_t k = clean_path.rfind('/');
  return std::string(k == std::string_view::npos ? clean_path : clean_path.substr(k + 1));
}

std::string dir_name(std::string_view clean_path) {
  size_t k = clean_path.rfind('/');
  if (k == std::string_view::npos || k == 0) return "/";
  return std::string(clean_path.substr(0, k));
}

Result<std::string> resolve_path(std::string_view path, const UnixUser& user,
                                 const std::string& default_workdir) {
  if (path.find('\0') != std::string_view::npos)
    return fail("path '" + std::string(path.substr(0, path.find('\0'))) +
                "...' contains a NUL byte");
  std::string p(path.empty() ? std::string_view(default_workdir) : path);
  if (!p.empty() && p[0] == '~') {
    if (p.size() > 1 && p[1] != '/')
      return fail("path '" + p + "': cannot expand another user's home directory");
    p = user.home + p.substr(1);
  }
  if (!p.empty() && p[0] == '/') return clean_absolute(p);
  if (user.home.empty() || user.home[0] != '/')
    return fail("path '" + p + "' is relative and user '" + user.name + "' has no home directory");
  return clean_absolute(user.home + "/" + p);
}

}  // namespace cordon::agent::filesystem
