#include "vmm/control/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/unix_socket.h"
#include "vmm/limits.h"
#include "vmm/seccomp.h"

namespace cordon::vmm::control {

using nlohmann::json;

std::string handle_request(Machine& m, const std::string& line, bool* stop_requested) {
  json reply;
  json req = json::parse(line, nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) {
    return json{{"ok", false}, {"error", "request must be a JSON object with a string \"cmd\""}}
        .dump();
  }
  const std::string cmd = req["cmd"];
  Status st;
  if (cmd == "status") {
    MachineStatus s = m.status();
    return json{{"ok", true},
                {"state", to_string(s.state)},
                {"stop_reason", s.stop_reason},
                {"setup_ms", s.setup_ms},
                {"first_exit_ms", s.first_exit_ms},
                {"boot_ms", s.boot_ms},
                {"exits", s.exits},
                {"exits_per_second", s.exits_per_second},
                {"uptime_s", s.uptime_s},
                {"host_kind", s.host_kind},
                {"mem_bytes", s.mem_bytes},
                {"vcpus", s.vcpus}}
        .dump();
  } else if (cmd == "start") {
    st = m.start();
  } else if (cmd == "pause") {
    st = m.pause();
  } else if (cmd == "resume") {
    st = m.resume();
  } else if (cmd == "snapshot") {
    if (!req.contains("path") || !req["path"].is_string() || req["path"].get<std::string>().empty())
      return json{{"ok", false}, {"error", "snapshot needs a string \"path\""}}.dump();
    st = m.snapshot(req["path"].get<std::string>());
  } else if (cmd == "stop") {
    *stop_requested = true;
  } else {
    return json{{"ok", false}, {"error", "unknown cmd \"" + cmd + "\""}}.dump();
  }
  if (!st) return json{{"ok", false}, {"error", st.error().message}}.dump();
  return json{{"ok", true}}.dump();
}

Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& path,
                                                            Machine* machine,
                                                            std::function<void()> on_stop,
                                                            bool seccomp) {
  std::unique_ptr<ControlServer> s(new ControlServer());
  s->path_ = path;
  s->machine_ = machine;
  s->on_stop_ = std::move(on_stop);
  auto listener = listen_unix(path, 8);
  if (!listener) return fail("control socket: " + listener.error().message);
  s->listener_ = kvm::Fd(listener->release());
  s->wake_ = kvm::Fd(::eventfd(0, EFD_CLOEXEC));
  s->thread_ = std::thread([p = s.get(), seccomp] {
    if (seccomp) {
      if (auto st = install_seccomp(ThreadKind::kControl); !st)
        return;  // no control without its filter
    }
    p->run();
  });
  return s;
}

ControlServer::~ControlServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void ControlServer::run() {
  // One client at a time: requests are rare (the sandbox manager is the only client).
  while (!stop_) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (stop_) return;
    if (!(p[0].revents & POLLIN)) continue;
    kvm::Fd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid() || !peer_is_root_or_self(client.get())) continue;
    std::string buf;
    char chunk[4096];
    bool close_client = false;
    while (!stop_ && !close_client) {
      pollfd q[2] = {{client.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (::poll(q, 2, -1) < 0 && errno != EINTR) break;
      if (stop_) return;
      ssize_t n = ::recv(client.get(), chunk, sizeof chunk, 0);
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        bool stop = false;
        std::string reply = handle_request(*machine_, line, &stop) + "\n";
        (void)!::send(client.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        if (stop) {
          on_stop_();
          close_client = true;
          break;
        }
      }
      if (buf.size() > static_cast<size_t>(kMaxControlLineBytes)) {
        std::string reply = R"({"ok":false,"error":"request line too long"})"
                            "\n";
        (void)!::send(client.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        break;
      }
    }
  }
}

}  // namespace cordon::vmm::control
