#include "e2b/request_fields.h"

#include <span>
#include <string>

namespace cordon::e2b {

using nlohmann::json;

namespace {

// A field's value that asks for nothing beyond what cordon does anyway.
using Inert = bool (*)(const json&);

bool is_true(const json& v) {
  return v.is_boolean() && v.get<bool>();
}
bool is_false(const json& v) {
  return v.is_boolean() && !v.get<bool>();
}
bool is_empty_container(const json& v) {
  return (v.is_array() || v.is_object()) && v.empty();
}
// SandboxAutoResumeConfig {enabled: false}: no auto-resume, which is what cordon does.
bool auto_resume_off(const json& v) {
  if (!v.is_object()) return false;
  for (const auto& [k, e] : v.items())
    if (k != "enabled" || !is_false(e)) return false;
  return true;
}
// SandboxIam with no tokens.
bool no_iam_tokens(const json& v) {
  if (!v.is_object()) return false;
  for (const auto& [k, e] : v.items())
    if (k != "tokens" || !(e.is_null() || is_empty_container(e))) return false;
  return true;
}
bool never(const json&) {
  return false;
}

struct Field {
  std::string_view name;
  // nullptr: carried out (its parser checks the value). Otherwise refused unless the value is
  // null or inert(value), and `missing` says what this cordon does not do.
  Inert inert = nullptr;
  std::string_view missing = {};
};

constexpr Field kCreate[] = {
    {"templateID"},
    {"timeout"},
    {"metadata"},
    {"envVars"},
    {"allow_internet_access"},
    {"network"},
    {"autoPause"},
    {"autoPauseMemory", is_true, "a file-system-only pause on timeout (autoPauseMemory: false)"},
    {"autoResume", auto_resume_off, "auto-resume of a paused sandbox by traffic"},
    {"secure", is_true, "envd without its access token (secure: false)"},
    {"mcp", never, "MCP servers in sandboxes"},
    {"iam", no_iam_tokens, "workload identity tokens (iam.tokens)"},
    {"volumeMounts", is_empty_container, "volumes (volumeMounts)"},
};

// The `network` object of a create.
constexpr Field kNetwork[] = {
    {"allowOut"},
    {"denyOut"},
    {"allowPublicTraffic", is_true,
     "sandbox ports behind a traffic access token (allowPublicTraffic: false)"},
    {"egressProxy", never, "egress through a SOCKS5 proxy (egressProxy)"},
    {"rules", is_empty_container, "header transform rules (network.rules)"},
    {"httpsPorts", is_empty_container, "HTTPS sandbox ports (httpsPorts)"},
    {"maskRequestHost", never, "a host mask for requests into the sandbox (maskRequestHost)"},
};

// PUT .../network: the update config itself, or wrapped as {"network": {...}}.
constexpr Field kNetworkUpdate[] = {
    {"allowOut"},
    {"denyOut"},
    {"allow_internet_access"},
    {"network"},
    {"egressProxy", never, "egress through a SOCKS5 proxy (egressProxy)"},
    {"rules", is_empty_container, "header transform rules (network.rules)"},
};

constexpr Field kConnect[] = {
    {"timeout"},
    {"memory", is_true, "resuming from the file system only (memory: false)"},
};

constexpr Field kResumeV1[] = {
    {"timeout"},
    {"autoPause", is_false, "changing autoPause on resume"},
    {"memory", is_true, "resuming from the file system only (memory: false)"},
};

constexpr Field kPause[] = {
    {"memory", is_true, "a file-system-only pause (memory: false)"},
};

constexpr Field kTimeout[] = {
    {"timeout"},
};

std::span<const Field> fields_of(RequestBody kind) {
  switch (kind) {
    case RequestBody::kCreate:
      return kCreate;
    case RequestBody::kNetwork:
      return kNetwork;
    case RequestBody::kNetworkUpdate:
      return kNetworkUpdate;
    case RequestBody::kConnect:
      return kConnect;
    case RequestBody::kResumeV1:
      return kResumeV1;
    case RequestBody::kPause:
      return kPause;
    case RequestBody::kTimeout:
      return kTimeout;
  }
  return {};
}

std::string field_path(std::string_view where, std::string_view name) {
  std::string p(where);
  if (!p.empty()) p += '.';
  // Names come from the client: bounded, and only printable bytes shown.
  for (char c : name.substr(0, 64)) p += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (name.size() > 64) p += "...";
  return p;
}

}  // namespace

Status check_request_fields(const json& body, RequestBody kind, std::string_view where) {
  if (!body.is_object()) return {};  // the parser names a body that is not an object
  std::span<const Field> fields = fields_of(kind);
  for (const auto& [name, value] : body.items()) {
    const Field* f = nullptr;
    for (const Field& c : fields)
      if (c.name == name) f = &c;
    if (!f)
      return fail(field_path(where, name) +
                  ": unknown field (refused rather than ignored; see the E2B API schema)");
    if (f->inert == nullptr || value.is_null() || f->inert(value)) continue;
    return fail(field_path(where, name) + ": not supported by this cordon (" +
                std::string(f->missing) + "); refused rather than ignored");
  }
  return {};
}

}  // namespace cordon::e2b
