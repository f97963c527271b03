// AdminApi: JSON requests to Vault calls. Exceptions from nlohmann::json (bad JSON, wrong
// types) stay inside handle() and become {"ok": false} answers.
#include <nlohmann/json.hpp>

#include "vault/admin.h"

namespace cordon::vault {
namespace {

using nlohmann::json;

json error_reply(const std::string& message) {
  return json{{"ok", false}, {"error", message}};
}

json time_or_null(const std::optional<SystemTime>& t) {
  return t ? json(format_rfc3339_micros(*t)) : json(nullptr);
}

std::optional<std::string> opt_string(const json& req, const char* key) {
  auto it = req.find(key);
  if (it == req.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

std::string required_string(const json& req, const char* key) {
  auto it = req.find(key);
  if (it == req.end() || !it->is_string())
    throw std::invalid_argument(std::string("missing string field '") + key + "'");
  return it->get<std::string>();
}

json dispatch(Vault& vault, const json& req) {
  if (!req.is_object()) return error_reply("request must be a JSON object");
  const std::string op = required_string(req, "op");
  if (op == "token.issue") {
    TokenIssue issue;
    issue.credential = required_string(req, "credential");
    issue.sandbox = opt_string(req, "sandbox");
    if (auto ttl = opt_string(req, "ttl")) {
      issue.ttl = parse_duration(*ttl);
      if (!issue.ttl) return error_reply("invalid ttl '" + *ttl + "' (examples: 90s, 15m, 2h, 7d)");
    }
    issue.note = opt_string(req, "note").value_or("");
    auto r = vault.issue_token(issue);
    if (!r) return error_reply(r.error().message);
    return json{{"ok", true},
                {"id", r->id},
                {"token", std::string(r->token.view())},
                {"expires", time_or_null(r->expires)}};
  }
  if (op == "token.revoke") {
    if (auto s = vault.revoke_token(required_string(req, "id")); !s)
      return error_reply(s.error().message);
    return json{{"ok", true}};
  }
  if (op == "token.list") {
    auto r = vault.list_tokens();
    if (!r) return error_reply(r.error().message);
    json list = json::array();
    for (const auto& t : *r) {
      list.push_back(json{{"id", t.id},
                          {"credential", t.credential},
                          {"sandbox", t.sandbox ? json(*t.sandbox) : json(nullptr)},
                          {"expires", time_or_null(t.expires)},
                          {"created", format_rfc3339_micros(t.created)},
                          {"revoked", time_or_null(t.revoked)},
                          {"last_used", time_or_null(t.last_used)},
                          {"note", t.note}});
    }
    return json{{"ok", true}, {"tokens", list}};
  }
  if (op == "sandbox.register") {
    auto address = opt_string(req, "address");
    std::optional<std::string_view> addr;
    if (address) addr = *address;
    auto r =
        vault.register_sandbox(required_string(req, "id"), required_string(req, "profile"), addr);
    if (!r) return error_reply(r.error().message);
    return json{
        {"ok", true}, {"id", r->info.id}, {"proxy_secret", std::string(r->proxy_secret.view())}};
  }
  if (op == "sandbox.unregister") {
    if (auto s = vault.unregister_sandbox(required_string(req, "id")); !s)
      return error_reply(s.error().message);
    return json{{"ok", true}};
  }
  if (op == "sandbox.list") {
    auto r = vault.list_sandboxes();
    if (!r) return error_reply(r.error().message);
    json list = json::array();
    for (const auto& s : *r) {
      list.push_back(json{{"id", s.id},
                          {"profile", s.profile},
                          {"address", s.address ? json(*s.address) : json(nullptr)},
                          {"created", format_rfc3339_micros(s.created)}});
    }
    return json{{"ok", true}, {"sandboxes", list}};
  }
  if (op == "apikey.create") {
    auto r =
        vault.create_api_key(required_string(req, "profile"), opt_string(req, "note").value_or(""));
    if (!r) return error_reply(r.error().message);
    return json{
        {"ok", true}, {"id", r->id}, {"key", std::string(r->key.view())}, {"profile", r->profile}};
  }
  if (op == "apikey.revoke") {
    if (auto s = vault.revoke_api_key(required_string(req, "id")); !s)
      return error_reply(s.error().message);
    return json{{"ok", true}};
  }
  if (op == "apikey.list") {
    auto r = vault.list_api_keys();
    if (!r) return error_reply(r.error().message);
    json list = json::array();
    for (const auto& k : *r) {
      list.push_back(json{{"id", k.id},
                          {"profile", k.profile},
                          {"note", k.note},
                          {"created", format_rfc3339_micros(k.created)},
                          {"revoked", time_or_null(k.revoked)}});
    }
    return json{{"ok", true}, {"api_keys", list}};
  }
  return error_reply("unknown op '" + op + "'");
}

}  // namespace

std::string AdminApi::handle(std::string_view request_json) {
  json reply;
  try {
    reply = dispatch(vault_, json::parse(request_json));
  } catch (const json::exception& e) {
    reply = error_reply(std::string("bad request: ") + e.what());
  } catch (const std::invalid_argument& e) {
    reply = error_reply(std::string("bad request: ") + e.what());
  }
  // Replacement of invalid UTF-8 keeps dump() from throwing on odd input echoed in errors.
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace cordon::vault
