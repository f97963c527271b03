#include "e2b/wire.h"

#include <algorithm>
#include <charconv>
#include <ctime>

#include "common/encoding.h"
#include "common/time_format.h"
#include "e2b/network.h"
#include "e2b/request_fields.h"

namespace cordon::e2b {

using nlohmann::json;
using sandbox::SandboxRecord;
using sandbox::SandboxState;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int64_t micros(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// A JSON body: empty (chunked POST of nothing) counts as {}; anything but an object is refused.
Result<json> parse_object(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // nlohmann reports the byte offset only through the exception: parse again to name it.
    try {
      json again = json::parse(body);
      (void)again;
    } catch (const json::parse_error& e) {
      return fail("request body is not valid JSON: " + std::string(e.what()));
    }
    return fail("request body is not valid JSON");
  }
  if (!j.is_object()) return fail("request body: expected a JSON object");
  return j;
}

Result<std::map<std::string, std::string>> string_map(const json& body, const char* key) {
  std::map<std::string, std::string> out;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) return fail(std::string(key) + ": expected an object of strings");
  if (it->size() > kMaxMapEntries)
    return fail(std::string(key) + ": more than " + std::to_string(kMaxMapEntries) + " entries");
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) return fail(std::string(key) + "." + k + ": expected a string");
    if (k.empty() || k.size() > 256) return fail(std::string(key) + ": a key is empty or too long");
    std::string s = v.get<std::string>();
    if (s.size() > kMaxMapValueBytes)
      return fail(std::string(key) + "." + k + ": longer than " +
                  std::to_string(kMaxMapValueBytes) + " bytes");
    out.emplace(k, std::move(s));
  }
  return out;
}

Result<std::optional<std::chrono::seconds>> timeout_field(const json& body) {
  auto it = body.find("timeout");
  if (it == body.end() || it->is_null()) return std::optional<std::chrono::seconds>{};
  if (!it->is_number_integer()) return fail("timeout: expected an integer number of seconds");
  int64_t t = it->get<int64_t>();
  if (t <= 0 || t > kMaxTimeout.count())
    return fail("timeout: " + std::to_string(t) + " is out of range (1.." +
                std::to_string(kMaxTimeout.count()) + " seconds)");
  return std::optional<std::chrono::seconds>(std::chrono::seconds(t));
}

Result<std::optional<bool>> bool_field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<bool>{};
  if (!it->is_boolean()) return fail(std::string(key) + ": expected true or false");
  return std::optional<bool>(it->get<bool>());
}

const char* state_name(SandboxState s) {
  return s == SandboxState::kPaused ? "paused" : "running";
}

std::string envd_version(const SandboxRecord& r) {
  return r.envd_version.empty() ? std::string(kDefaultEnvdVersion) : r.envd_version;
}

json network_json(const sandbox::NetworkOverlay& n) {
  json j = json::object();
  if (!n.allow_out.empty()) j["allowOut"] = n.allow_out;
  if (!n.deny_out.empty()) j["denyOut"] = n.deny_out;
  return j;
}

}  // namespace

std::string error_body(int status, std::string_view message) {
  json j = {{"code", status}, {"message", std::string(message)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<std::string> percent_decode(std::string_view text, bool plus_as_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> parse_query(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos <= query.size() && !query.empty()) {
    size_t amp = query.find('&', pos);
    std::string_view part = query.substr(pos, amp == std::string_view::npos ? amp : amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      auto name = percent_decode(part.substr(0, eq), true);
      auto value = percent_decode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
      if (!name || !value)
        return fail("query parameter '" + std::string(part.substr(0, 64)) +
                    "': malformed percent-encoding");
      if (out.size() >= 64) return fail("query: more than 64 parameters");
      out.emplace_back(std::move(*name), std::move(*value));
    }
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return out;
}

Result<std::map<std::string, std::string>> decode_metadata_filter(std::string_view once) {
  std::map<std::string, std::string> out;
  auto whole = percent_decode(once, true);
  if (!whole) return fail("metadata: malformed percent-encoding");
  std::string_view w = *whole;
  size_t pos = 0;
  while (pos <= w.size() && !w.empty()) {
    size_t amp = w.find('&', pos);
    std::string_view part = w.substr(pos, amp == std::string_view::npos ? amp : amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      if (eq == std::string_view::npos)
        return fail("metadata: '" + std::string(part.substr(0, 64)) + "' is not key=value");
      auto k = percent_decode(part.substr(0, eq), true);
      auto v = percent_decode(part.substr(eq + 1), true);
      if (!k || !v) return fail("metadata: malformed percent-encoding in a key or value");
      if (out.size() >= kMaxMapEntries) return fail("metadata: too many entries");
      out[std::move(*k)] = std::move(*v);
    }
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return out;
}

std::string encode_cursor(const Cursor& c) {
  return base64url_encode(std::to_string(c.started_us) + ":" + c.id);
}

Result<Cursor> decode_cursor(std::string_view token) {
  auto raw = base64url_decode(token);
  if (!raw) return fail("nextToken: not a token this server issued");
  size_t colon = raw->find(':');
  Cursor c;
  if (colon == std::string::npos || colon == 0)
    return fail("nextToken: not a token this server issued");
  auto [p, ec] = std::from_chars(raw->data(), raw->data() + colon, c.started_us);
  if (ec != std::errc() || p != raw->data() + colon)
    return fail("nextToken: not a token this server issued");
  c.id = raw->substr(colon + 1);
  if (!plausible_sandbox_id(c.id)) return fail("nextToken: not a token this server issued");
  return c;
}

Result<ListQuery> parse_list_query(std::string_view query) {
  auto params = parse_query(query);
  if (!params) return fail(params.error());
  ListQuery q;
  for (const auto& [name, value] : *params) {
    if (name == "state") {
      size_t pos = 0;
      while (pos <= value.size()) {
        size_t comma = value.find(',', pos);
        std::string s = value.substr(pos, comma == std::string::npos ? comma : comma - pos);
        if (s == "running")
          q.states.insert(SandboxState::kRunning);
        else if (s == "paused")
          q.states.insert(SandboxState::kPaused);
        else if (!s.empty())
          return fail("state: '" + s.substr(0, 32) + "' is not running or paused");
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (name == "metadata") {
      auto m = decode_metadata_filter(value);
      if (!m) return fail(m.error());
      q.metadata = std::move(*m);
    } else if (name == "limit") {
      size_t n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || n == 0)
        return fail("limit: expected a positive integer");
      q.limit = std::min(n, kMaxListLimit);
    } else if (name == "nextToken") {
      if (value.empty()) continue;
      auto c = decode_cursor(value);
      if (!c) return fail(c.error());
      q.after = std::move(*c);
    } else if (name == "startedAfter") {
      auto t = parse_rfc3339(value);
      if (!t) return fail("startedAfter: expected an RFC 3339 time");
      q.started_after = *t;
    } else if (name == "template") {
      q.template_name = value;
    } else if (name == "order") {
      if (value == "desc")
        q.descending = true;
      else if (value != "asc" && !value.empty())
        return fail("order: expected asc or desc");
    }
    // Other parameters (e.g. a future filter) are ignored, as unknown body fields are.
  }
  return q;
}

ListPage select_page(const std::vector<SandboxRecord>& all, std::string_view owner,
                     const ListQuery& q) {
  std::vector<const SandboxRecord*> sel;
  for (const auto& r : all) {
    if (r.owner != owner) continue;
    if (!q.states.empty() && !q.states.count(r.state)) continue;
    if (q.started_after && r.started_at <= *q.started_after) continue;
    if (!q.template_name.empty() && r.template_id != q.template_name &&
        r.template_alias != q.template_name)
      continue;
    bool meta_ok = true;
    for (const auto& [k, v] : q.metadata) {
      auto it = r.metadata.find(k);
      if (it == r.metadata.end() || it->second != v) {
        meta_ok = false;
        break;
      }
    }
    if (!meta_ok) continue;
    sel.push_back(&r);
  }
  auto key_less = [](const SandboxRecord* a, const SandboxRecord* b) {
    int64_t ta = micros(a->started_at), tb = micros(b->started_at);
    return ta != tb ? ta < tb : a->id < b->id;
  };
  std::sort(sel.begin(), sel.end(), key_less);
  if (q.descending) std::reverse(sel.begin(), sel.end());
  size_t start = 0;
  if (q.after) {
    // The first item strictly after the cursor in the chosen order; works even when the
    // cursor's sandbox is gone meanwhile.
    auto after = [&](const SandboxRecord* r) {
      int64_t t = micros(r->started_at);
      bool greater = t != q.after->started_us ? t > q.after->started_us : r->id > q.after->id;
      bool equal = t == q.after->started_us && r->id == q.after->id;
      return q.descending ? (!greater && !equal) : greater;
    };
    while (start < sel.size() && !after(sel[start])) ++start;
  }
  ListPage page;
  size_t end = std::min(sel.size(), start + q.limit);
  page.items.assign(sel.begin() + static_cast<std::ptrdiff_t>(start),
                    sel.begin() + static_cast<std::ptrdiff_t>(end));
  if (end < sel.size() && !page.items.empty()) {
    const SandboxRecord* last = page.items.back();
    page.next_token = encode_cursor(Cursor{micros(last->started_at), last->id});
  }
  return page;
}

Result<CreateRequest> parse_create(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return fail(j.error());
  if (auto s = check_request_fields(*j, RequestBody::kCreate); !s) return fail(s.error());
  if (auto n = j->find("network"); n != j->end())
    if (auto s = check_request_fields(*n, RequestBody::kNetwork, "network"); !s)
      return fail(s.error());
  CreateRequest c;
  auto tpl = j->find("templateID");
  if (tpl == j->end() || tpl->is_null()) return fail("templateID: required");
  if (!tpl->is_string() || tpl->get<std::string>().empty() || tpl->get<std::string>().size() > 128)
    return fail("templateID: expected a template id or alias");
  c.template_name = tpl->get<std::string>();
  auto t = timeout_field(*j);
  if (!t) return fail(t.error());
  if (*t) c.timeout = **t;
  auto md = string_map(*j, "metadata");
  if (!md) return fail(md.error());
  c.metadata = std::move(*md);
  auto env = string_map(*j, "envVars");
  if (!env) return fail(env.error());
  c.env_vars = std::move(*env);
  auto internet = bool_field(*j, "allow_internet_access");
  if (!internet) return fail(internet.error());
  auto net_it = j->find("network");
  auto net = network_overlay(net_it == j->end() ? nullptr : &*net_it, *internet);
  if (!net) return fail(net.error());
  c.network = std::move(*net);
  auto ap = bool_field(*j, "autoPause");
  if (!ap) return fail(ap.error());
  c.auto_pause = ap->value_or(false);
  return c;
}

Result<std::chrono::seconds> parse_timeout_body(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return fail(j.error());
  if (auto s = check_request_fields(*j, RequestBody::kTimeout); !s) return fail(s.error());
  auto t = timeout_field(*j);
  if (!t) return fail(t.error());
  if (!*t) return fail("timeout: required");
  return **t;
}

Result<std::optional<std::chrono::seconds>> parse_connect_body(std::string_view body,
                                                               bool v1_resume) {
  auto j = parse_object(body);
  if (!j) return fail(j.error());
  RequestBody kind = v1_resume ? RequestBody::kResumeV1 : RequestBody::kConnect;
  if (auto s = check_request_fields(*j, kind); !s) return fail(s.error());
  return timeout_field(*j);
}

Status parse_pause_body(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return fail(j.error());
  return check_request_fields(*j, RequestBody::kPause);
}

Result<sandbox::NetworkOverlay> parse_network_body(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return fail(j.error());
  auto internet = bool_field(*j, "allow_internet_access");
  if (!internet) return fail(internet.error());
  if (auto s = check_request_fields(*j, RequestBody::kNetworkUpdate); !s) return fail(s.error());
  // Accept the overlay as the body itself ({"allowOut":[...]}) or wrapped ({"network":{...}}).
  auto net_it = j->find("network");
  const json* net = net_it != j->end() ? &*net_it : &*j;
  if (net != &*j)
    if (auto s = check_request_fields(*net, RequestBody::kNetworkUpdate, "network"); !s)
      return fail(s.error());
  return network_overlay(net, *internet);
}

std::string rfc3339(SystemTime t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  int frac = static_cast<int>(ms % 1000);
  if (frac < 0) {
    frac += 1000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

json sandbox_json(const SandboxRecord& r, std::string_view client_id) {
  json j = {{"sandboxID", r.id},
            {"templateID", r.template_id},
            {"clientID", std::string(client_id)},
            {"envdVersion", envd_version(r)},
            {"envdAccessToken", r.envd_access_token},
            {"trafficAccessToken", nullptr},
            {"domain", nullptr}};
  if (!r.template_alias.empty()) j["alias"] = r.template_alias;
  return j;
}

json listed_json(const SandboxRecord& r) {
  json j = {{"sandboxID", r.id},
            {"templateID", r.template_id},
            {"clientID", "cordon"},
            {"startedAt", rfc3339(r.started_at)},
            {"endAt", rfc3339(r.end_at)},
            {"cpuCount", std::max<uint32_t>(1, (r.resources.cpu_millis + 999) / 1000)},
            {"memoryMB", r.resources.memory_bytes >> 20},
            {"diskSizeMB", r.resources.disk_bytes >> 20},
            {"envdVersion", envd_version(r)},
            {"metadata", r.metadata},
            {"state", state_name(r.state)}};
  if (!r.template_alias.empty()) j["alias"] = r.template_alias;
  return j;
}

json detail_json(const SandboxRecord& r) {
  json j = listed_json(r);
  j["envdAccessToken"] = r.envd_access_token;
  j["domain"] = nullptr;
  j["allowInternetAccess"] = r.network.internet;
  j["network"] = network_json(r.network);
  j["lifecycle"] = {
      {"onTimeout", r.on_timeout == sandbox::TimeoutAction::kPause ? "pause" : "kill"},
      {"autoResume", false}};
  return j;
}

json metric_json(const sandbox::SandboxMetrics& m) {
  return {{"timestamp", rfc3339(m.at)},
          {"timestampUnix",
           std::chrono::duration_cast<std::chrono::seconds>(m.at.time_since_epoch()).count()},
          {"cpuCount", m.cpu_count},
          {"cpuUsedPct", m.cpu_used_pct},
          {"memUsed", m.mem_used},
          {"memTotal", m.mem_total},
          {"memCache", m.mem_cache},
          {"diskUsed", m.disk_used},
          {"diskTotal", m.disk_total}};
}

bool plausible_sandbox_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

}  // namespace cordon::e2b
