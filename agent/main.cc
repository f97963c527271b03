// cordon-agent: the in-sandbox agent (envd 0.6.13's protocol) on TCP and/or vsock.
//   cordon-agent --listen 0.0.0.0:49983 [--vsock 49983] [--user-default user]
// Hidden test flags: --passwd-file, --group-file, --template-env, --system-ca-file,
// --extra-ca-file (read users and defaults from files other than the sandbox's /etc).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/agent_state.h"
#include "agent/envd_endpoints.h"
#include "agent/http/server.h"
#include "agent/process/process_manager.h"
#include "agent/process/process_service.h"
#include "agent/process/spawn.h"
#ifdef CORDON_AGENT_HAS_FILESYSTEM
#include "agent/filesystem/filesystem_service.h"
#endif
#ifdef CORDON_AGENT_HAS_FILES
#include "agent/files/files_handler.h"
#endif

namespace {

constexpr const char* kVersion = "0.6.13";

void usage() {
  std::fprintf(stderr,
               "usage: cordon-agent [--listen ADDR:PORT] [--vsock PORT] [--user-default NAME]\n"
               "                    [--version]\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cordon::agent;
  // Before any thread exists: SIGCHLD goes to the reaper's sigtimedwait only, and a write to
  // a closed pipe or socket is an error, not a signal.
  cordon::agent::process::ProcessManager::block_sigchld();
  ::signal(SIGPIPE, SIG_IGN);
  cordon::agent::process::raise_fd_limit();

  std::vector<std::string> listens;
  std::vector<uint32_t> vsock_ports;
  std::string user_default;
  AgentPaths paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cordon-agent: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--version") {
      std::printf("%s\n", kVersion);
      return 0;
    } else if (a == "--listen") {
      listens.push_back(value("--listen"));
    } else if (a == "--vsock") {
      std::string v = value("--vsock");
      char* end = nullptr;
      unsigned long port = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != 0 || port > 0xffffffffUL) {
        std::fprintf(stderr, "cordon-agent: --vsock %s: not a port number\n", v.c_str());
        return 2;
      }
      vsock_ports.push_back(static_cast<uint32_t>(port));
    } else if (a == "--user-default") {
      user_default = value("--user-default");
    } else if (a == "--passwd-file") {
      paths.passwd = value("--passwd-file");
    } else if (a == "--group-file") {
      paths.group = value("--group-file");
    } else if (a == "--template-env") {
      paths.template_env = value("--template-env");
    } else if (a == "--system-ca-file") {
      paths.system_ca_bundle = value("--system-ca-file");
    } else if (a == "--extra-ca-file") {
      paths.extra_ca_bundle = value("--extra-ca-file");
    } else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "cordon-agent: unknown argument '%s'\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (listens.empty() && vsock_ports.empty()) listens.push_back("0.0.0.0:49983");

  AgentState state(paths);
  if (!user_default.empty()) {
    InitSettings s = state.settings();
    s.default_user = user_default;
    (void)state.apply_init(s);
  }
  cordon::agent::process::ProcessManager mgr;
  http::Router router;
  register_envd_endpoints(router, state);

  http::Server server([&](http::Exchange& ex) {
    if (!check_access(ex, state)) return;
#ifdef CORDON_AGENT_HAS_FILESYSTEM
    if (filesystem::handle_filesystem(ex, state)) return;
#endif
#ifdef CORDON_AGENT_HAS_FILES
    if (files::handle_files(ex, state)) return;
#endif
    if (cordon::agent::process::handle_process(ex, state, mgr)) return;
    router.dispatch(ex);
  });
  for (const auto& l : listens) {
    auto port = server.listen_tcp(l);
    if (!port) {
      std::fprintf(stderr, "cordon-agent: %s\n", port.error().message.c_str());
      return 1;
    }
    std::fprintf(stderr, "cordon-agent %s listening on %s (port %u)\n", kVersion, l.c_str(),
                 unsigned(*port));
  }
  for (uint32_t p : vsock_ports) {
    if (auto st = server.listen_vsock(p); !st) {
      std::fprintf(stderr, "cordon-agent: %s\n", st.error().message.c_str());
      return 1;
    }
    std::fprintf(stderr, "cordon-agent %s listening on vsock port %u\n", kVersion, p);
  }
  server.start();
  server.wait();
  return 0;
}
