#include "e2b/control_plane.h"

#include "e2b/wire.h"

namespace cordon::e2b {

using sandbox::ManagerError;
using sandbox::SandboxRecord;
using sandbox::SandboxState;

namespace {

ApiResponse json_response(int status, const nlohmann::json& body) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

ApiResponse no_content() {
  ApiResponse r;
  r.status = 204;
  return r;
}

ApiResponse not_found(std::string_view id) {
  return error_response(404, "sandbox \"" + std::string(id.substr(0, 64)) + "\" not found");
}

// "/v2/sandboxes/abc/connect" → {"abc", "connect"}; "/sandboxes" → {"", ""}.
struct Route {
  bool v2 = false;
  bool collection = false;  // /sandboxes itself
  std::string id, action;
  bool extra = false;  // more segments than {id}/{action}
};

std::optional<Route> route_of(std::string_view path) {
  Route r;
  if (path.starts_with("/v2/")) {
    r.v2 = true;
    path.remove_prefix(3);
  } else if (path.starts_with("/v1/")) {
    path.remove_prefix(3);
  }
  if (!path.starts_with("/sandboxes")) return std::nullopt;
  path.remove_prefix(10);
  if (path.empty() || path == "/") {
    r.collection = true;
    return r;
  }
  if (path[0] != '/') return std::nullopt;
  path.remove_prefix(1);
  size_t slash = path.find('/');
  r.id = std::string(path.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view rest = path.substr(slash + 1);
    size_t s2 = rest.find('/');
    r.action = std::string(rest.substr(0, s2));
    r.extra = s2 != std::string_view::npos && s2 + 1 < rest.size();
  }
  return r;
}

}  // namespace

ApiResponse error_response(int status, std::string_view message, int retry_after_s) {
  ApiResponse r;
  r.status = status;
  r.body = error_body(status, message);
  if (retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

ControlPlane::ControlPlane(std::shared_ptr<SandboxService> sandboxes,
                           std::shared_ptr<ApiKeyCache> keys, ControlPlaneOptions options)
    : sandboxes_(std::move(sandboxes)), keys_(std::move(keys)), options_(std::move(options)) {}

bool ControlPlane::is_control_path(std::string_view path) {
  for (std::string_view p : {"/sandboxes", "/v2/sandboxes", "/v1/sandboxes", "/templates",
                             "/v2/templates", "/snapshots", "/volumes", "/secrets", "/teams"}) {
    if (path.starts_with(p) && (path.size() == p.size() || path[p.size()] == '/')) return true;
  }
  return false;
}

ApiResponse ControlPlane::handle(const ApiRequest& req) const {
  if (!req.api_key || req.api_key->empty()) return error_response(401, "missing x-api-key header");
  auto key = keys_->verify(*req.api_key);
  if (!key) {
    if (key.error().code == vault::code(vault::ErrorCode::kRefused))
      return error_response(401, "invalid API key");
    return error_response(503, "the API key store is unavailable; try again", 1);
  }
  std::string_view target = req.target;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  auto route = route_of(path);
  if (!route) return error_response(404, "no such route: " + std::string(path.substr(0, 128)));
  if (route->collection) {
    if (req.method == "POST") return create(*key, req);
    if (req.method == "GET") return list(*key, query);
    return error_response(405, "method " + req.method + " is not allowed on /sandboxes");
  }
  if (route->extra)
    return error_response(404, "no such route: " + std::string(path.substr(0, 128)));
  return on_sandbox(*key, req, route->id, route->action, route->v2);
}

ApiResponse ControlPlane::manager_error(const Error& e, std::string_view id) const {
  if (is(e, ManagerError::kNotFound))
    return id.empty() ? error_response(404, e.message) : not_found(id);
  if (is(e, ManagerError::kConflict)) return error_response(409, e.message);
  if (is(e, ManagerError::kCapacity))
    return error_response(429, e.message, options_.capacity_retry_after_s);
  if (is(e, ManagerError::kInvalidArgument)) return error_response(400, e.message);
  return error_response(500, e.message);
}

ApiResponse ControlPlane::create(const vault::ApiKeyGrant& key, const ApiRequest& r) const {
  auto c = parse_create(r.body);
  if (!c) return error_response(400, c.error().message);
  sandbox::CreateSpec spec;
  spec.template_name = c->template_name;
  spec.profile = key.profile;
  spec.owner = key.id;
  spec.network = std::move(c->network);
  spec.env_vars = std::move(c->env_vars);
  spec.metadata = std::move(c->metadata);
  spec.timeout = c->timeout;
  spec.on_timeout = c->auto_pause ? sandbox::TimeoutAction::kPause : sandbox::TimeoutAction::kKill;
  auto rec = sandboxes_->create(spec);
  if (!rec) {
    if (is(rec.error(), ManagerError::kNotFound)) return error_response(404, rec.error().message);
    return manager_error(rec.error(), "");
  }
  return json_response(201, sandbox_json(*rec, options_.client_id));
}

ApiResponse ControlPlane::list(const vault::ApiKeyGrant& key, std::string_view query) const {
  auto q = parse_list_query(query);
  if (!q) return error_response(400, q.error().message);
  std::vector<SandboxRecord> all = sandboxes_->list();
  ListPage page = select_page(all, key.id, *q);
  nlohmann::json arr = nlohmann::json::array();
  size_t running = 0;
  for (const auto& r : all)
    if (r.owner == key.id && r.state == SandboxState::kRunning) ++running;
  for (const SandboxRecord* r : page.items) arr.push_back(listed_json(*r));
  ApiResponse resp = json_response(200, arr);
  if (page.next_token) resp.headers.emplace_back("X-Next-Token", *page.next_token);
  resp.headers.emplace_back("X-Total-Running", std::to_string(running));
  return resp;
}

ApiResponse ControlPlane::connect(const SandboxRecord& rec, const ApiRequest& r,
                                  bool v1_resume) const {
  auto timeout = parse_connect_body(r.body, v1_resume);
  if (!timeout) return error_response(400, timeout.error().message);
  int status = 200;
  if (rec.state == SandboxState::kPaused) {
    auto s = sandboxes_->resume(rec.id);
    // Resumed by a concurrent connect meanwhile: it runs, which is what was asked.
    if (!s && !is(s.error(), ManagerError::kConflict)) return manager_error(s.error(), rec.id);
    if (s) status = 201;
  }
  if (*timeout) {
    auto s = sandboxes_->set_timeout(rec.id, **timeout);
    if (!s) return manager_error(s.error(), rec.id);
  }
  auto now = sandboxes_->get(rec.id);
  if (!now) return manager_error(now.error(), rec.id);
  return json_response(status, sandbox_json(*now, options_.client_id));
}

ApiResponse ControlPlane::on_sandbox(const vault::ApiKeyGrant& key, const ApiRequest& r,
                                     std::string_view id, std::string_view action, bool v2) const {
  if (!plausible_sandbox_id(id)) return not_found(id);
  auto rec = sandboxes_->get(id);
  if (!rec) return manager_error(rec.error(), id);
  // Another key's sandbox is answered exactly like an unknown id.
  if (rec->owner != key.id) return not_found(id);
  const std::string& m = r.method;
  if (action.empty()) {
    if (m == "GET") return json_response(200, detail_json(*rec));
    if (m == "DELETE") {
      auto s = sandboxes_->kill(id);
      return s ? no_content() : manager_error(s.error(), id);
    }
  } else if (action == "connect" && m == "POST") {
    return connect(*rec, r);
  } else if (action == "resume" && m == "POST" && !v2) {
    // v1 legacy resume: 201 when it resumed, 409 when it was running.
    if (rec->state != SandboxState::kPaused)
      return error_response(409, "sandbox \"" + std::string(id) + "\" is not paused");
    return connect(*rec, r, /*v1_resume=*/true);
  } else if (action == "timeout" && m == "POST") {
    auto t = parse_timeout_body(r.body);
    if (!t) return error_response(400, t.error().message);
    auto s = sandboxes_->set_timeout(id, *t);
    return s ? no_content() : manager_error(s.error(), id);
  } else if (action == "pause" && m == "POST") {
    if (auto b = parse_pause_body(r.body); !b) return error_response(400, b.error().message);
    if (rec->state == SandboxState::kPaused)
      return error_response(409, "sandbox \"" + std::string(id) + "\" is already paused");
    auto s = sandboxes_->pause(id);
    return s ? no_content() : manager_error(s.error(), id);
  } else if (action == "metrics" && m == "GET") {
    nlohmann::json arr = nlohmann::json::array();
    if (rec->state == SandboxState::kRunning) {
      auto mt = sandboxes_->metrics(id);
      if (!mt) return manager_error(mt.error(), id);
      arr.push_back(metric_json(*mt));
    }
    return json_response(200, arr);
  } else if (action == "network" && m == "PUT") {
    auto n = parse_network_body(r.body);
    if (!n) return error_response(400, n.error().message);
    auto s = sandboxes_->set_network(id, *n);
    return s ? no_content() : manager_error(s.error(), id);
  } else if (action != "connect" && action != "resume" && action != "timeout" &&
             action != "pause" && action != "metrics" && action != "network") {
    return error_response(404,
                          "no such route: /sandboxes/{id}/" + std::string(action.substr(0, 64)));
  }
  return error_response(405, "method " + m + " is not allowed here");
}

}  // namespace cordon::e2b
