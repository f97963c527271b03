// The pure parts of a template build: validating a spec, hashing its inputs, rendering the
// files written into the rootfs and the customize script, reading mmdebstrap's output (missing
// packages, an unreachable mirror) and the host's apt sources, and the manifest. No processes
// and no file-system writes here, so that all of it is unit-tested.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sandbox/templates/template_store.h"

namespace cordon::sandbox::detail {

// The Debian release every template is built from, and the version of the build recipe below:
// both are hashed, so changing either rebuilds every template.
inline constexpr std::string_view kSuite = "bookworm";
inline constexpr int kRecipeVersion = 1;
// What the manifest says when the agent's --version output holds no version.
inline constexpr std::string_view kDefaultEnvdVersion = "0.6.13";

// Bounds on a spec (it comes from the command line or the API).
inline constexpr size_t kMaxPackages = 256;
inline constexpr size_t kMaxFiles = 256;
inline constexpr size_t kMaxEnv = 256;
inline constexpr size_t kMaxNameChars = 64;
inline constexpr size_t kMaxValueChars = 4096;  // env values, commands, paths
// Missing package names reported from mmdebstrap's output.
inline constexpr size_t kMaxReportedPackages = 32;

inline constexpr std::string_view kCaBundle = "/etc/ssl/certs/ca-certificates.crt";
inline constexpr std::string_view kAgentPath = "/usr/local/bin/cordon-agent";
inline constexpr std::string_view kCaPath = "/usr/local/share/ca-certificates/cordon-root.crt";
inline constexpr std::string_view kConfigDir = "/etc/cordon";

bool valid_template_name(std::string_view name);  // [a-z0-9][a-z0-9._-]*, <= 64 chars
bool valid_template_id(std::string_view id);      // 20 chars [a-z0-9]
bool valid_package_name(std::string_view name);   // Debian: [a-z0-9][a-z0-9+.-]+ (+ ":arch")
bool valid_env_name(std::string_view name);       // [A-Za-z_][A-Za-z0-9_]*

// Everything about a spec that can be checked without touching the host (the agent and CA
// paths are checked by the store). Errors name the offending input.
Status validate_spec(const TemplateSpec& spec);

// The base set plus the spec's packages, sorted, without duplicates.
std::vector<std::string> all_packages(const TemplateSpec& spec);

// Hashes of the host-side inputs, computed by the store (file contents), so that the inputs
// hash itself stays a pure function.
struct InputDigests {
  std::string agent;               // hex SHA-256 of the agent binary
  std::string ca;                  // hex SHA-256 of the CA certificate
  std::vector<std::string> files;  // per spec.files entry: hex digest of its tree
  std::string mmdebstrap_version;  // "mmdebstrap 1.3.5"
};

// The packages layer (mmdebstrap's output, shared by templates with the same package set).
std::string layer_hash(const std::vector<std::string>& packages,
                       std::string_view mmdebstrap_version);
// Every input of the template (name included, so that two names never share a directory).
std::string content_hash(const TemplateSpec& spec, const InputDigests& digests);
// 20 chars [a-z0-9] from a hex digest.
std::string id_from_hash(std::string_view hex_digest);

// /etc/cordon/template.env: the CA variables, then the spec's env (which may override them).
std::string render_env_file(const std::map<std::string, std::string>& env);

// The shell script run (as root, in a private mount and pid namespace) on a copy of the layer:
// $1 = rootfs, $2 = staging tree copied over /, $3 = where to write the agent's --version.
std::string render_customize_script(const TemplateSpec& spec);

// Single-quotes `s` for sh.
std::string shell_quote(std::string_view s);

// Package names from "E: Unable to locate package NAME" lines (at most kMaxReportedPackages).
std::vector<std::string> missing_packages(std::string_view output);
// True when the output shows apt could not reach its sources (fetch/resolve/connect errors).
bool mirror_unreachable(std::string_view output);
// The version the agent printed: the token after "envd", else the last x.y.z token, else "".
std::string parse_agent_version(std::string_view output);

// One-line apt sources ("deb URI SUITE COMPONENTS") for `suite`, its -updates and -security,
// taken from the host's sources: `files` are (file name, content) of /etc/apt/sources.list and
// sources.list.d/*.list|*.sources. Options ([signed-by=...]) are dropped: mmdebstrap finds
// the keyring. Empty when none matches (mmdebstrap then uses its default mirror).
std::vector<std::string> mirror_lines(const std::vector<std::pair<std::string, std::string>>& files,
                                      std::string_view suite);

// manifest.json <-> TemplateInfo (paths and `current` are filled in by the store).
struct Manifest {
  TemplateInfo info;
  std::string layer;  // the layer hash it was made from
  double build_seconds = 0;
};
std::string manifest_to_json(const Manifest& m);
Result<Manifest> manifest_from_json(std::string_view text, const std::string& where);

}  // namespace cordon::sandbox::detail
