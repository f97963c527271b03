// The socket-free parts of the E2B control plane (specs/e2b-compat.md §2): error bodies,
// query decoding (the list's triple-encoded metadata), list paging cursors, the request bodies
// the SDK sends, and the JSON shapes it expects back. Every input here comes from an API
// client: bad input yields an error naming the field and what is wrong, never a throw.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/time_format.h"
#include "sandbox/manager/manager.h"

namespace cordon::e2b {

inline constexpr std::string_view kDefaultEnvdVersion = "0.6.13";
inline constexpr std::chrono::seconds kDefaultTimeout{300};
inline constexpr std::chrono::seconds kMaxTimeout{24 * 3600};
inline constexpr size_t kDefaultListLimit = 100;
inline constexpr size_t kMaxListLimit = 1000;
inline constexpr size_t kMaxMapEntries = 256;      // metadata / envVars entries
inline constexpr size_t kMaxMapValueBytes = 8192;  // one metadata / envVars value
inline constexpr size_t kMaxNetworkEntries = 256;  // allowOut + denyOut entries

// `{"code":N,"message":"..."}` (infra apierrors.SendAPIError): the SDK decides on `code`.
std::string error_body(int status, std::string_view message);

// Percent-decoding; `plus_as_space` for form encoding (query strings). nullopt on a malformed
// escape ("%G1", a trailing "%").
std::optional<std::string> percent_decode(std::string_view text, bool plus_as_space);

// "a=1&b=2" → pairs, each name and value decoded once (form rules). Error names the parameter.
Result<std::vector<std::pair<std::string, std::string>>> parse_query(std::string_view query);

// The list's `metadata` filter, given the parameter as parse_query decoded it once: decoded
// again as a whole, split on '&' and '=', each key and value decoded (spec §2.3).
Result<std::map<std::string, std::string>> decode_metadata_filter(std::string_view once_decoded);

// Paging position: after the sandbox with this start time and id (the list's sort key).
struct Cursor {
  int64_t started_us = 0;
  std::string id;
};
std::string encode_cursor(const Cursor& c);
Result<Cursor> decode_cursor(std::string_view token);

struct ListQuery {
  std::set<sandbox::SandboxState> states;  // empty = running and paused
  std::map<std::string, std::string> metadata;
  std::optional<SystemTime> started_after;
  std::string template_name;  // id or alias; empty = any
  bool descending = false;
  size_t limit = kDefaultListLimit;
  std::optional<Cursor> after;
};
Result<ListQuery> parse_list_query(std::string_view query);

struct ListPage {
  std::vector<const sandbox::SandboxRecord*> items;  // point into the list given
  std::optional<std::string> next_token;             // X-Next-Token when more follow
};
// The page of `all` that `owner` may see and `q` selects, sorted by (startedAt, id).
ListPage select_page(const std::vector<sandbox::SandboxRecord>& all, std::string_view owner,
                     const ListQuery& q);

struct CreateRequest {
  std::string template_name;
  std::chrono::seconds timeout = kDefaultTimeout;
  std::map<std::string, std::string> metadata, env_vars;
  sandbox::NetworkOverlay network;
  bool auto_pause = false;
};
// Every parser below first passes the body through the field gate (e2b/request_fields.h): a
// field that cordon does not carry out, or one the schema does not have, is a 400 naming it.
// NewSandboxV2 (and the v1 body, a subset).
Result<CreateRequest> parse_create(std::string_view body);
// `{"timeout":N}` of POST .../timeout (required) and of connect (optional; empty body = {}).
Result<std::chrono::seconds> parse_timeout_body(std::string_view body);
// ConnectSandbox(V2), or the v1 ResumedSandbox when `v1_resume`.
Result<std::optional<std::chrono::seconds>> parse_connect_body(std::string_view body,
                                                               bool v1_resume = false);
// SandboxPauseRequest (empty body = {}).
Status parse_pause_body(std::string_view body);
// PUT .../network: the `network` object itself, optionally with allow_internet_access.
Result<sandbox::NetworkOverlay> parse_network_body(std::string_view body);

// RFC 3339 with milliseconds, UTC ("2026-12-01T10:00:00.123Z").
std::string rfc3339(SystemTime t);

// Sandbox (create/connect), ListedSandbox, SandboxDetail, SandboxMetric.
nlohmann::json sandbox_json(const sandbox::SandboxRecord& r, std::string_view client_id);
nlohmann::json listed_json(const sandbox::SandboxRecord& r);
nlohmann::json detail_json(const sandbox::SandboxRecord& r);
nlohmann::json metric_json(const sandbox::SandboxMetrics& m);

// Sandbox ids as the API accepts them: 1..64 of [a-z0-9-]. Anything else is a 404 at once.
bool plausible_sandbox_id(std::string_view id);

}  // namespace cordon::e2b
