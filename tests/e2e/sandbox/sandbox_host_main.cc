// cordon-test-sandbox-host: hosts a sandbox Manager beside a running `cordon serve` (tests and
// benchmarks, until serve hosts its own): SteeringClientConfinement (serve's steering socket +
// the vault), sandboxes' host veths in --gateway-netns, the control socket at
// <state>/sandbox.sock for the `cordon sandbox` CLI. Runs until SIGTERM/SIGINT, then kills its
// sandboxes.
// Usage: cordon-test-sandbox-host STATE GATEWAY_NETNS TEMPLATE_STATE PREFIX [WARM]
#include <signal.h>

#include <cstdio>
#include <string>

#include "sandbox/manager/control.h"
#include "sandbox/manager/steering_client_confinement.h"

using namespace cordon;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s STATE GATEWAY_NETNS TEMPLATE_STATE PREFIX [WARM]\n", argv[0]);
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  StateDir state{argv[1]};
  StateDir templates{argv[3]};
  sandbox::ManagerOptions o;
  o.state = state;
  o.netns = argv[2];
  o.name_prefix = argv[4];
  o.confinement = sandbox::make_steering_client_confinement(state);
  o.find_template = [templates](const std::string& n) {
    return sandbox::TemplateStore(templates).find(n);
  };
  o.ipv4_pool = "10.200.0.0/16";  // the fake internet routes this pool back to the gateway
  if (argc > 5 && std::atoi(argv[5]) > 0) o.warm_pool = {{"base", uint32_t(std::atoi(argv[5]))}};
  auto m = sandbox::Manager::open(o);
  if (!m) {
    std::fprintf(stderr, "sandbox host: %s\n", m.error().message.c_str());
    return 1;
  }
  auto server = sandbox::ManagerControlServer::start(**m, sandbox::manager_socket_path(state));
  if (!server) {
    std::fprintf(stderr, "sandbox host: %s\n", server.error().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "sandbox host: ready on %s\n", sandbox::manager_socket_path(state).c_str());
  int sig = 0;
  sigwait(&set, &sig);
  server->reset();
  auto st = (*m)->kill_all();
  if (!st) std::fprintf(stderr, "sandbox host: %s\n", st.error().message.c_str());
  return st ? 0 : 1;
}
