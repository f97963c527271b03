#include "server/sandboxes.h"

#include "e2b/api_server.h"
#include "e2b/auth.h"
#include "e2b/control_plane.h"
#include "server/confinement.h"
#ifdef CORDON_SERVER_HAVE_MANAGER
#include "sandbox/manager/control.h"
#include "server/manager_service.h"
#endif

namespace cordon::server {

namespace {

#ifdef CORDON_SERVER_HAVE_MANAGER
class Parts final : public SandboxParts {
 public:
  ~Parts() override {
    if (api) api->stop();
    api.reset();
    control.reset();
    manager.reset();
  }
  std::shared_ptr<sandbox::Manager> manager;
  std::unique_ptr<sandbox::ManagerControlServer> control;
  std::unique_ptr<e2b::ApiServer> api;
};
#endif

}  // namespace

Result<std::unique_ptr<SandboxParts>> start_sandboxes(
    const ServerOptions& o, const StateDir& state, sandbox::SteeringService* steering,
    std::shared_ptr<vault::Vault> vault,
    std::shared_ptr<gateway::adapters::SandboxOverlays> overlays, std::FILE* log) {
  if (!o.sandboxes && o.api_listen.empty())
    return std::unique_ptr<SandboxParts>(std::make_unique<SandboxParts>());
#ifndef CORDON_SERVER_HAVE_MANAGER
  (void)state, (void)steering, (void)vault, (void)overlays, (void)log;
  return fail("serve: --api-listen/--sandboxes: this cordon was built without the sandbox manager");
#else
  auto parts = std::make_unique<Parts>();
  sandbox::ManagerOptions mo;
  mo.state = state;
  mo.confinement = make_confinement(steering, vault, overlays);
  mo.warm_pool = o.warm_pool;
  mo.max_sandboxes = o.max_sandboxes;
  auto m = sandbox::Manager::open(std::move(mo));
  if (!m) return with_context("serve: the sandbox manager", m.error());
  parts->manager = std::shared_ptr<sandbox::Manager>(std::move(*m));
  std::string sock = sandbox::manager_socket_path(state);
  auto c = sandbox::ManagerControlServer::start(*parts->manager, sock);
  if (!c) return with_context("serve: the sandbox control socket", c.error());
  parts->control = std::move(*c);
  std::fprintf(log, "cordon: sandbox manager; control on unix:%s\n", sock.c_str());
  if (!o.api_listen.empty()) {
    auto svc = make_manager_service(parts->manager);
    auto keys = std::make_shared<e2b::ApiKeyCache>(
        [vault](std::string_view key) { return vault->verify_api_key(key); });
    auto cp = std::make_shared<e2b::ControlPlane>(svc, keys);
    e2b::ApiServerOptions ao;
    ao.listen = o.api_listen;
    ao.tls_cert = o.api_tls_cert;
    ao.tls_key = o.api_tls_key;
    ao.threads = o.threads;
    auto api = e2b::ApiServer::start(ao, cp, svc);
    if (!api) return fail("serve: " + api.error().message);
    parts->api = std::move(*api);
    std::fprintf(log, "cordon: E2B API on %s://%s\n", o.api_tls_cert.empty() ? "http" : "https",
                 parts->api->address().c_str());
  }
  return std::unique_ptr<SandboxParts>(std::move(parts));
#endif
}

}  // namespace cordon::server
