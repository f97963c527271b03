// The manager's control socket, server and client; see control.h for the protocol.
#include "sandbox/manager/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/encoding.h"
#include "common/time_format.h"
#include "common/unix_socket.h"

namespace cordon::sandbox {
namespace {

using nlohmann::json;

constexpr int kRequestTimeoutMs = 5000;

std::string backend_text(BackendKind k) {
  return k == BackendKind::kGvisor ? "gvisor" : k == BackendKind::kMicrovm ? "microvm" : "auto";
}

json record_json(const SandboxRecord& r) {
  json md = json::object();
  for (const auto& [k, v] : r.metadata) md[k] = v;
  return {{"id", r.id},
          {"template", r.template_alias},
          {"template_id", r.template_id},
          {"profile", r.profile},
          {"owner", r.owner},
          {"backend", r.backend},
          {"state", r.state == SandboxState::kPaused ? "paused" : "running"},
          {"started_at", format_rfc3339_micros(r.started_at)},
          {"end_at", format_rfc3339_micros(r.end_at)},
          {"address", r.address},
          {"metadata", md},
          {"cpu_millis", r.resources.cpu_millis},
          {"memory_bytes", r.resources.memory_bytes},
          {"disk_bytes", r.resources.disk_bytes}};
}

SandboxRecord record_from(const json& j) {
  SandboxRecord r;
  r.id = j.value("id", "");
  r.template_alias = j.value("template", "");
  r.template_id = j.value("template_id", "");
  r.profile = j.value("profile", "");
  r.owner = j.value("owner", "");
  r.backend = j.value("backend", "");
  r.state = j.value("state", "") == "paused" ? SandboxState::kPaused : SandboxState::kRunning;
  r.address = j.value("address", "");
  if (auto t = parse_rfc3339(j.value("started_at", ""))) r.started_at = *t;
  if (auto t = parse_rfc3339(j.value("end_at", ""))) r.end_at = *t;
  if (j.contains("metadata") && j["metadata"].is_object())
    for (auto it = j["metadata"].begin(); it != j["metadata"].end(); ++it)
      if (it->is_string()) r.metadata[it.key()] = it->get<std::string>();
  r.resources.cpu_millis = j.value("cpu_millis", r.resources.cpu_millis);
  r.resources.memory_bytes = j.value("memory_bytes", r.resources.memory_bytes);
  r.resources.disk_bytes = j.value("disk_bytes", r.resources.disk_bytes);
  return r;
}

json error_json(const Error& e) {
  return {{"ok", false}, {"error", e.message}, {"code", e.code}};
}

bool send_line(int fd, const json& j) {
  return write_all(fd, j.dump() + "\n");
}

std::map<std::string, std::string> string_map(const json& j, const char* key) {
  std::map<std::string, std::string> out;
  if (j.contains(key) && j[key].is_object())
    for (auto it = j[key].begin(); it != j[key].end(); ++it)
      if (it->is_string()) out[it.key()] = it->get<std::string>();
  return out;
}

}  // namespace

std::string manager_socket_path(const StateDir& state) {
  return state.root + "/sandbox.sock";
}

struct ManagerControlServer::Impl {
  Manager* manager = nullptr;
  std::string path;
  int listen_fd = -1;
  int stop_fd = -1;
  std::thread accept_thread;
  std::mutex mu;
  std::condition_variable cv;
  int active = 0;

  ~Impl() {
    if (listen_fd >= 0) close(listen_fd);
    if (stop_fd >= 0) close(stop_fd);
  }

  void handle(int fd, const json& req) {
    std::string op = req.value("op", "");
    std::string id = req.value("id", "");
    if (op == "create") {
      CreateSpec spec;
      spec.template_name = req.value("template", "");
      spec.profile = req.value("profile", "");
      spec.env_vars = string_map(req, "env");
      spec.metadata = string_map(req, "metadata");
      if (req.contains("timeout") && req["timeout"].is_number_integer())
        spec.timeout = std::chrono::seconds(req["timeout"].get<int64_t>());
      std::string b = req.value("backend", "auto");
      if (b == "gvisor")
        spec.backend = BackendKind::kGvisor;
      else if (b == "microvm")
        spec.backend = BackendKind::kMicrovm;
      else if (b != "auto") {
        send_line(fd, error_json(Error{"unknown backend '" + b + "' (auto, gvisor, microvm)",
                                       code(ManagerError::kInvalidArgument)}));
        return;
      }
      auto r = manager->create(spec);
      send_line(fd, r ? json{{"ok", true}, {"sandbox", record_json(*r)}} : error_json(r.error()));
    } else if (op == "list") {
      json arr = json::array();
      for (const auto& r : manager->list()) arr.push_back(record_json(r));
      send_line(fd, {{"ok", true}, {"sandboxes", arr}});
    } else if (op == "info") {
      auto r = manager->get(id);
      send_line(fd, r ? json{{"ok", true}, {"sandbox", record_json(*r)}} : error_json(r.error()));
    } else if (op == "kill" || op == "pause" || op == "resume") {
      Status st = op == "kill"    ? manager->kill(id)
                  : op == "pause" ? manager->pause(id)
                                  : manager->resume(id);
      send_line(fd, st ? json{{"ok", true}} : error_json(st.error()));
    } else if (op == "exec") {
      std::vector<std::string> argv;
      if (req.contains("argv") && req["argv"].is_array())
        for (const auto& a : req["argv"])
          if (a.is_string()) argv.push_back(a.get<std::string>());
      std::atomic<bool> peer_gone{false};
      ExecOutput out;
      out.on_stdout = [&](std::string_view d) {
        if (!peer_gone && !send_line(fd, {{"stdout", base64_encode(d)}})) peer_gone = true;
      };
      out.on_stderr = [&](std::string_view d) {
        if (!peer_gone && !send_line(fd, {{"stderr", base64_encode(d)}})) peer_gone = true;
      };
      auto r = manager->exec(id, argv, out, req.value("user", std::string("user")));
      send_line(fd, r ? json{{"ok", true}, {"exit", *r}} : error_json(r.error()));
    } else {
      send_line(fd,
                error_json(Error{"unknown op '" + op + "'", code(ManagerError::kInvalidArgument)}));
    }
  }

  void serve(int fd) {
    if (!peer_is_root_or_self(fd)) return;
    auto line =
        read_line(fd, kMaxControlRequestBytes, std::chrono::milliseconds(kRequestTimeoutMs));
    if (!line) return;
    json req = json::parse(*line, nullptr, false);
    if (req.is_discarded() || !req.is_object()) {
      send_line(fd, error_json(Error{"request is not a JSON object",
                                     code(ManagerError::kInvalidArgument)}));
      return;
    }
    handle(fd, req);
  }

  void accept_loop() {
    while (true) {
      pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return active < kMaxControlConnections; });
        ++active;
      }
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        std::lock_guard lk(mu);
        --active;
        continue;
      }
      std::thread([this, fd] {
        serve(fd);
        close(fd);
        std::lock_guard lk(mu);
        --active;
        cv.notify_all();
      }).detach();
    }
  }
};

ManagerControlServer::ManagerControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ManagerControlServer::~ManagerControlServer() {
  uint64_t one = 1;
  (void)!write(impl_->stop_fd, &one, sizeof one);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  unlink(impl_->path.c_str());
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->active == 0; });
}

Result<std::unique_ptr<ManagerControlServer>> ManagerControlServer::start(
    Manager& manager, const std::string& socket_path) {
  auto impl = std::make_unique<Impl>();
  impl->manager = &manager;
  impl->path = socket_path;
  auto listener = listen_unix(socket_path, 64);
  if (!listener) return fail("sandbox control: " + listener.error().message);
  impl->listen_fd = listener->release();
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return fail(std::string("sandbox control: eventfd: ") + strerror(errno));
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<ManagerControlServer>(new ManagerControlServer(std::move(impl)));
}

// ---- client -------------------------------------------------------------------------------------

namespace {

class ClientConn {
 public:
  ~ClientConn() {
    if (fd_ >= 0) close(fd_);
  }
  Status open(const std::string& path, const json& request) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return fail(std::string("sandbox control: socket: ") + strerror(errno));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) return fail("sandbox control: path too long: " + path);
    memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      return fail("sandbox control " + path + ": " + strerror(errno) +
                  ": cordon serve is not running with this state directory (start `cordon serve "
                  "--steering ebpf` first: it hosts the sandbox manager on this socket)");
    if (!send_line(fd_, request)) return fail("sandbox control " + path + ": send failed");
    return {};
  }
  // The next JSON line; error at EOF.
  Result<json> next() {
    size_t nl;
    while ((nl = buf_.find('\n')) == std::string::npos) {
      char tmp[65536];
      ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail("sandbox control: connection closed without an answer");
      buf_.append(tmp, static_cast<size_t>(n));
      if (buf_.size() > (64u << 20)) return fail("sandbox control: answer too large");
    }
    json j = json::parse(buf_.substr(0, nl), nullptr, false);
    buf_.erase(0, nl + 1);
    if (j.is_discarded() || !j.is_object()) return fail("sandbox control: bad answer");
    return j;
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

Result<json> call(const std::string& path, const json& request) {
  ClientConn c;
  if (auto st = c.open(path, request); !st) return fail(st.error());
  auto j = c.next();
  if (!j) return fail(j.error());
  if (!j->value("ok", false))
    return fail(j->value("error", std::string("refused")), j->value("code", 0));
  return *j;
}

}  // namespace

Result<SandboxRecord> control_create(const std::string& path, const CreateSpec& spec) {
  json env = json::object(), md = json::object();
  for (const auto& [k, v] : spec.env_vars) env[k] = v;
  for (const auto& [k, v] : spec.metadata) md[k] = v;
  auto j = call(path, {{"op", "create"},
                       {"template", spec.template_name},
                       {"profile", spec.profile},
                       {"env", env},
                       {"metadata", md},
                       {"timeout", spec.timeout.count()},
                       {"backend", backend_text(spec.backend)}});
  if (!j) return fail(j.error());
  return record_from((*j)["sandbox"]);
}

Result<std::vector<SandboxRecord>> control_list(const std::string& path) {
  auto j = call(path, {{"op", "list"}});
  if (!j) return fail(j.error());
  std::vector<SandboxRecord> out;
  for (const auto& s : (*j)["sandboxes"]) out.push_back(record_from(s));
  return out;
}

Result<SandboxRecord> control_info(const std::string& path, const std::string& id) {
  auto j = call(path, {{"op", "info"}, {"id", id}});
  if (!j) return fail(j.error());
  return record_from((*j)["sandbox"]);
}

Status control_kill(const std::string& path, const std::string& id) {
  auto j = call(path, {{"op", "kill"}, {"id", id}});
  if (!j) return fail(j.error());
  return {};
}
Status control_pause(const std::string& path, const std::string& id) {
  auto j = call(path, {{"op", "pause"}, {"id", id}});
  if (!j) return fail(j.error());
  return {};
}
Status control_resume(const std::string& path, const std::string& id) {
  auto j = call(path, {{"op", "resume"}, {"id", id}});
  if (!j) return fail(j.error());
  return {};
}

Result<int> control_exec(const std::string& path, const std::string& id,
                         const std::vector<std::string>& argv, const std::string& user,
                         const std::function<void(std::string_view)>& on_stdout,
                         const std::function<void(std::string_view)>& on_stderr) {
  ClientConn c;
  if (auto st = c.open(path, {{"op", "exec"}, {"id", id}, {"argv", argv}, {"user", user}}); !st)
    return fail(st.error());
  while (true) {
    auto j = c.next();
    if (!j) return fail(j.error());
    for (const char* stream : {"stdout", "stderr"}) {
      if (!j->contains(stream) || !(*j)[stream].is_string()) continue;
      auto bytes = base64_decode((*j)[stream].get<std::string>());
      const auto& cb = std::string_view(stream) == "stdout" ? on_stdout : on_stderr;
      if (bytes && cb) cb(*bytes);
    }
    if (j->contains("ok")) {
      if (!j->value("ok", false))
        return fail(j->value("error", std::string("refused")), j->value("code", 0));
      return j->value("exit", -1);
    }
  }
}

}  // namespace cordon::sandbox
