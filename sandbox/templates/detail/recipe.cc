#include "sandbox/templates/detail/recipe.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/encoding.h"
#include "common/time_format.h"

namespace cordon::sandbox::detail {
namespace {

bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

Failure invalid(const std::string& message) {
  return fail(message, int(TemplateError::kInvalidSpec));
}

bool has_control(std::string_view s, bool allow_newline) {
  for (char c : s) {
    if (c == '\0') return true;
    if (!allow_newline && (c == '\n' || c == '\r')) return true;
  }
  return false;
}

bool under(std::string_view path, std::string_view dir) {
  return path == dir ||
         (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

// An absolute path in normal form: no empty, "." or ".." components, no trailing slash.
bool normal_absolute_path(std::string_view p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/') return false;
  size_t i = 1;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view part = p.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

Status validate_file(const TemplateFile& f, size_t index) {
  std::string where =
      "--file #" + std::to_string(index + 1) + " (" + f.source + ":" + f.destination + ")";
  if (f.source.empty()) return invalid(where + ": empty source path");
  if (f.source.size() > kMaxValueChars || f.destination.size() > kMaxValueChars)
    return invalid(where + ": path longer than " + std::to_string(kMaxValueChars));
  if (has_control(f.source, false) || has_control(f.destination, false))
    return invalid(where + ": path contains a newline or NUL");
  if (!normal_absolute_path(f.destination))
    return invalid(where + ": destination must be an absolute path without '.', '..' or '//'");
  for (std::string_view reserved : {"/proc", "/sys", "/dev", "/run", "/tmp"})
    if (under(f.destination, reserved))
      return invalid(where + ": destination is under " + std::string(reserved) +
                     ", which the sandbox mounts at run time");
  if (under(f.destination, kConfigDir) || f.destination == kAgentPath || f.destination == kCaPath ||
      f.destination == "/usr/local/bin" || f.destination == "/usr/local/share/ca-certificates")
    return invalid(where + ": destination would replace cordon's own files");
  return {};
}

std::string field(std::string_view key, std::string_view value) {
  return std::string(key) + " " + std::to_string(value.size()) + ":" + std::string(value) + "\n";
}

std::string sha256_hex(std::string_view data) {
  return hex_encode(sha256(data));
}

}  // namespace

bool valid_template_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameChars || !is_lower_alnum(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return is_lower_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

bool valid_template_id(std::string_view id) {
  return id.size() == 20 && std::all_of(id.begin(), id.end(), is_lower_alnum);
}

bool valid_package_name(std::string_view name) {
  std::string_view pkg = name;
  size_t colon = name.find(':');
  if (colon != std::string_view::npos) {
    std::string_view arch = name.substr(colon + 1);
    if (arch.empty() || !std::all_of(arch.begin(), arch.end(),
                                     [](char c) { return is_lower_alnum(c) || c == '-'; }))
      return false;
    pkg = name.substr(0, colon);
  }
  if (pkg.size() < 2 || pkg.size() > 128 || !is_lower_alnum(pkg[0])) return false;
  return std::all_of(pkg.begin(), pkg.end(),
                     [](char c) { return is_lower_alnum(c) || c == '+' || c == '-' || c == '.'; });
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

Status validate_spec(const TemplateSpec& spec) {
  if (!valid_template_name(spec.name))
    return invalid("template name '" + spec.name +
                   "' is not [a-z0-9][a-z0-9._-]* (at most 64 characters)");
  if (spec.packages.size() > kMaxPackages)
    return invalid("too many packages (" + std::to_string(spec.packages.size()) + ", at most " +
                   std::to_string(kMaxPackages) + ")");
  for (const auto& p : spec.packages)
    if (!valid_package_name(p))
      return invalid("package name '" + p + "' is not a valid Debian package name");
  if (spec.files.size() > kMaxFiles)
    return invalid("too many --file entries (at most " + std::to_string(kMaxFiles) + ")");
  std::set<std::string> destinations;
  for (size_t i = 0; i < spec.files.size(); ++i) {
    if (auto st = validate_file(spec.files[i], i); !st) return st;
    if (!destinations.insert(spec.files[i].destination).second)
      return invalid("--file destination " + spec.files[i].destination + " given twice");
  }
  if (spec.env.size() > kMaxEnv)
    return invalid("too many --env entries (at most " + std::to_string(kMaxEnv) + ")");
  for (const auto& [k, v] : spec.env) {
    if (!valid_env_name(k)) return invalid("env name '" + k + "' is not [A-Za-z_][A-Za-z0-9_]*");
    if (v.size() > kMaxValueChars || has_control(v, false))
      return invalid("env value of " + k + " has a newline or NUL, or is longer than " +
                     std::to_string(kMaxValueChars));
  }
  for (const auto& [what, cmd] :
       {std::pair<const char*, const std::string&>{"start command", spec.start_cmd},
        {"ready command", spec.ready_cmd}})
    if (cmd.size() > kMaxValueChars || has_control(cmd, true))
      return invalid(std::string(what) + " contains NUL or is longer than " +
                     std::to_string(kMaxValueChars));
  if (spec.agent_binary.empty()) return invalid("no agent binary given");
  if (spec.ca_cert_pem_path.empty()) return invalid("no CA certificate given");
  return {};
}

std::vector<std::string> all_packages(const TemplateSpec& spec) {
  std::set<std::string> set;
  for (const auto& p : TemplateStore::base_packages()) set.insert(p);
  for (const auto& p : spec.packages) set.insert(p);
  return {set.begin(), set.end()};
}

std::string layer_hash(const std::vector<std::string>& packages,
                       std::string_view mmdebstrap_version) {
  std::string s = field("layer-recipe", std::to_string(kRecipeVersion));
  s += field("suite", kSuite);
  s += field("mmdebstrap", mmdebstrap_version);
  for (const auto& p : packages) s += field("package", p);
  return sha256_hex(s);
}

std::string content_hash(const TemplateSpec& spec, const InputDigests& d) {
  std::string s = field("recipe", std::to_string(kRecipeVersion));
  s += field("layer", layer_hash(all_packages(spec), d.mmdebstrap_version));
  s += field("name", spec.name);
  for (size_t i = 0; i < spec.files.size(); ++i) {
    s += field("file-destination", spec.files[i].destination);
    s += field("file-digest", i < d.files.size() ? d.files[i] : "");
  }
  for (const auto& [k, v] : spec.env) s += field("env", k + "=" + v);
  s += field("start", spec.start_cmd);
  s += field("ready", spec.ready_cmd);
  s += field("agent", d.agent);
  s += field("ca", d.ca);
  return sha256_hex(s);
}

std::string id_from_hash(std::string_view hex_digest) {
  // Base32 (a-z, 2-7) of the first 100 bits: 20 characters in [a-z0-9].
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  auto raw = hex_decode(hex_digest).value_or(std::string(32, '\0'));
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (unsigned char byte : raw) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5 && out.size() < 20) {
      out += kAlphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
    if (out.size() == 20) break;
  }
  return out;
}

std::string render_env_file(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> all;
  for (const char* k :
       {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"})
    all[k] = std::string(kCaBundle);
  for (const auto& [k, v] : env) all[k] = v;
  std::string out;
  for (const auto& [k, v] : all) out += k + "=" + v + "\n";
  return out;
}

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string render_customize_script(const TemplateSpec& spec) {
  std::string s =
      "#!/bin/sh\n"
      "# Generated by cordon: turns a copy of the packages layer into a template.\n"
      "set -eu\n"
      "root=$1 stage=$2 version_out=$3\n"
      "echo 'customize: user 1000'\n"
      "chroot \"$root\" groupadd --gid 1000 user\n"
      "chroot \"$root\" useradd --uid 1000 --gid 1000 --home-dir /home/user --create-home "
      "--shell /bin/bash user\n"
      "echo 'customize: agent, CA, /etc/cordon and files'\n"
      // Extracted by the chroot's tar so that symlinks resolve inside the rootfs;
      // --keep-directory-symlink keeps merged-/usr links such as /bin -> usr/bin.
      "tar -C \"$stage\" --numeric-owner -cf - . | chroot \"$root\" tar -C / --numeric-owner "
      "--no-overwrite-dir --keep-directory-symlink -xpf -\n";
  for (const auto& f : spec.files)
    if (under(f.destination, "/home/user"))
      s += "chroot \"$root\" chown -R 1000:1000 " + shell_quote(f.destination) + "\n";
  s += "echo 'customize: update-ca-certificates'\n"
       "chroot \"$root\" update-ca-certificates --fresh >/dev/null\n"
       // The host's resolv.conf and hostname were copied in by mmdebstrap; every sandbox gets
       // its own, so the template holds plain placeholder files.
       "rm -f \"$root/etc/resolv.conf\" \"$root/etc/hostname\" \"$root/etc/hosts\"\n"
       "printf '# written by cordon when a sandbox starts\\n' > \"$root/etc/resolv.conf\"\n"
       "printf 'sandbox\\n' > \"$root/etc/hostname\"\n"
       "printf '127.0.0.1 localhost sandbox\\n::1 localhost ip6-localhost ip6-loopback\\n' > "
       "\"$root/etc/hosts\"\n"
       "rm -rf \"$root\"/var/lib/apt/lists/* \"$root\"/var/cache/apt/* "
       "\"$root\"/var/cache/debconf/*-old \"$root\"/var/log/apt/* \"$root\"/tmp/* "
       "\"$root\"/var/tmp/*\n"
       "echo 'customize: agent --version'\n"
       "mount -t proc proc \"$root/proc\"\n"
       "chroot \"$root\" /usr/local/bin/cordon-agent --version > \"$version_out\" 2>&1 || "
       "{ rc=$?; umount \"$root/proc\"; cat \"$version_out\"; "
       "echo \"customize: the agent does not run in the rootfs (exit $rc)\"; exit 1; }\n"
       "umount \"$root/proc\"\n";
  return s;
}

std::vector<std::string> missing_packages(std::string_view output) {
  static constexpr std::string_view kMarker = "Unable to locate package ";
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = output.find(kMarker, pos)) != std::string_view::npos) {
    pos += kMarker.size();
    size_t end = pos;
    while (end < output.size() && output[end] != '\n' && output[end] != '\r' && output[end] != ' ')
      ++end;
    std::string name(output.substr(pos, end - pos));
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
      if (names.size() == kMaxReportedPackages) break;
    }
    pos = end;
  }
  return names;
}

bool mirror_unreachable(std::string_view output) {
  for (std::string_view marker :
       {"Temporary failure resolving", "Could not resolve", "Failed to fetch",
        "Could not connect to", "Unable to connect to", "Connection timed out",
        "Network is unreachable", "No route to host", "Connection refused"})
    if (output.find(marker) != std::string_view::npos) return true;
  return false;
}

std::string parse_agent_version(std::string_view output) {
  static const std::regex kEnvd(R"([Ee][Nn][Vv][Dd][ /v:=]*v?([0-9]+\.[0-9]+\.[0-9]+))");
  static const std::regex kAny(R"(([0-9]+\.[0-9]+\.[0-9]+))");
  std::string text(output.substr(0, 4096));
  std::smatch m;
  if (std::regex_search(text, m, kEnvd)) return m[1].str();
  std::string last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kAny); it != std::sregex_iterator();
       ++it)
    last = (*it)[1].str();
  return last;
}

namespace {

std::vector<std::string> split_ws(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool wanted_suite(std::string_view s, std::string_view suite) {
  return s == suite || s == std::string(suite) + "-updates" ||
         s == std::string(suite) + "-security";
}

void add_line(std::vector<std::string>& out, const std::string& uri, const std::string& suite,
              const std::vector<std::string>& components) {
  if (uri.find("://") == std::string::npos || components.empty()) return;
  std::string line = "deb " + uri + " " + suite;
  for (const auto& c : components) line += " " + c;
  if (std::find(out.begin(), out.end(), line) == out.end()) out.push_back(line);
}

void parse_one_line(std::string_view text, std::string_view suite, std::vector<std::string>& out) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    // Drop "[ options ]", which may contain spaces.
    if (auto open = line.find('['); open != std::string::npos) {
      auto close = line.find(']', open);
      if (close == std::string::npos) continue;
      line.erase(open, close - open + 1);
    }
    auto words = split_ws(line);
    if (words.size() < 4 || words[0] != "deb" || !wanted_suite(words[2], suite)) continue;
    add_line(out, words[1], words[2], {words.begin() + 3, words.end()});
  }
}

void parse_deb822(std::string_view text, std::string_view suite, std::vector<std::string>& out) {
  std::map<std::string, std::string> stanza;
  std::string last_key;
  auto flush = [&]() {
    if (!stanza.empty()) {
      auto types = split_ws(stanza["types"]);
      auto enabled_words = split_ws(stanza["enabled"]);
      std::string enabled = enabled_words.empty() ? "" : enabled_words[0];
      if (std::find(types.begin(), types.end(), "deb") != types.end() && enabled != "no")
        for (const auto& uri : split_ws(stanza["uris"]))
          for (const auto& s : split_ws(stanza["suites"]))
            if (wanted_suite(s, suite)) add_line(out, uri, s, split_ws(stanza["components"]));
    }
    stanza.clear();
    last_key.clear();
  };
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '#') continue;
    if (split_ws(line).empty()) {
      flush();
      continue;
    }
    if (line[0] == ' ' || line[0] == '\t') {
      if (!last_key.empty()) stanza[last_key] += " " + line;
      continue;
    }
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    stanza[key] = line.substr(colon + 1);
    last_key = key;
  }
  flush();
}

}  // namespace

std::vector<std::string> mirror_lines(const std::vector<std::pair<std::string, std::string>>& files,
                                      std::string_view suite) {
  std::vector<std::string> out;
  for (const auto& [name, content] : files) {
    if (name.size() >= 8 && name.substr(name.size() - 8) == ".sources")
      parse_deb822(content, suite, out);
    else
      parse_one_line(content, suite, out);
  }
  return out;
}

std::string manifest_to_json(const Manifest& m) {
  const TemplateInfo& i = m.info;
  nlohmann::json j = {
      {"id", i.id},
      {"alias", i.alias},
      {"envd_version", i.envd_version},
      {"built_at", format_rfc3339_micros(i.built_at)},
      {"packages", i.packages},
      {"env", i.env},
      {"start_cmd", i.start_cmd},
      {"ready_cmd", i.ready_cmd},
      {"content_hash", i.content_hash},
      {"layer", m.layer},
      {"image_bytes", i.image_bytes},
      {"rootfs_bytes", i.rootfs_bytes},
      {"build_seconds", m.build_seconds},
  };
  return j.dump(2) + "\n";
}

Result<Manifest> manifest_from_json(std::string_view text, const std::string& where) {
  Manifest m;
  try {
    auto j = nlohmann::json::parse(text);
    TemplateInfo& i = m.info;
    i.id = j.at("id").get<std::string>();
    i.alias = j.at("alias").get<std::string>();
    i.envd_version = j.at("envd_version").get<std::string>();
    auto at = parse_rfc3339(j.at("built_at").get<std::string>());
    if (!at) return fail(where + ": built_at is not an RFC 3339 time");
    i.built_at = *at;
    i.packages = j.at("packages").get<std::vector<std::string>>();
    i.env = j.at("env").get<std::map<std::string, std::string>>();
    i.start_cmd = j.value("start_cmd", "");
    i.ready_cmd = j.value("ready_cmd", "");
    i.content_hash = j.at("content_hash").get<std::string>();
    i.image_bytes = j.value("image_bytes", uint64_t{0});
    i.rootfs_bytes = j.value("rootfs_bytes", uint64_t{0});
    m.layer = j.value("layer", "");
    m.build_seconds = j.value("build_seconds", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return fail(where + ": " + e.what());
  }
  if (!valid_template_id(m.info.id)) return fail(where + ": bad id '" + m.info.id + "'");
  return m;
}

}  // namespace cordon::sandbox::detail
