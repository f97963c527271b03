// Blocking Unix-socket server for AdminApi: one thread, one request per connection. Admin
// traffic is a handful of operator commands, so simplicity beats concurrency here; a slow
// client is cut off after kAdminIoTimeout so it cannot hold the thread.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "vault/admin.h"
#include "vault/limits.h"

namespace cordon::vault {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return fail("admin socket path '" + path + "' is empty or longer than " +
                std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

void set_timeouts(int fd) {
  timeval tv{};
  tv.tv_sec = kAdminIoTimeout.count() / 1000;
  tv.tv_usec = (kAdminIoTimeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

// Reads until '\n' or EOF; false on timeout, error or a request over the limit.
bool read_request(int fd, std::string& out) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return !out.empty();
    out.append(buf, size_t(n));
    if (auto nl = out.find('\n'); nl != std::string::npos) {
      out.resize(nl);
      return true;
    }
    if (out.size() > kMaxAdminRequestBytes) return false;
  }
}

}  // namespace

struct AdminServer::State {
  AdminApi* api = nullptr;
  Fd listen_fd;
  Fd wake_read, wake_write;  // a pipe: writing to it wakes the poll loop for stop()
  std::atomic<bool> stopping{false};
  std::thread thread;

  void serve_one(int fd) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return;
    // The file mode already limits who can connect; this also holds if it is ever loosened.
    if (cred.uid != 0 && cred.uid != ::geteuid()) return;
    set_timeouts(fd);
    std::string request;
    if (!read_request(fd, request)) {
      (void)write_all(fd,
                      "{\"ok\":false,\"error\":\"request too large, truncated or timed out\"}\n");
      return;
    }
    std::string reply = api->handle(request);
    reply += '\n';
    (void)write_all(fd, reply);  // a client that went away just misses its answer
  }

  void run() {
    for (;;) {
      pollfd fds[2] = {{listen_fd.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
      int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (stopping.load() || n < 0 || (fds[1].revents & POLLIN)) return;
      if (fds[0].revents & POLLIN) {
        Fd client(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (client.get() >= 0) serve_one(client.get());
      }
    }
  }
};

Result<std::unique_ptr<AdminServer>> AdminServer::start(const std::string& socket_path,
                                                        AdminApi& api) {
  auto addr = unix_address(socket_path);
  if (!addr) return fail(addr.error());
  struct stat st;
  if (::lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return fail(socket_path + " exists and is not a socket; refusing to replace it");
    // A socket that still answers belongs to a running server: do not steal it.
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe.get() >= 0 &&
        ::connect(probe.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) == 0)
      return fail("another process is serving the admin socket " + socket_path);
    ::unlink(socket_path.c_str());
  }
  // Bind under a temporary name, make it 0600, then rename into place: the final path never
  // exists with a looser mode, whatever the umask.
  const std::string tmp = socket_path + ".tmp" + std::to_string(::getpid());
  auto tmp_addr = unix_address(tmp);
  if (!tmp_addr) return fail(tmp_addr.error());
  ::unlink(tmp.c_str());
  auto state = std::make_unique<State>();
  state->api = &api;
  state->listen_fd = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (state->listen_fd.get() < 0) return fail("admin socket: socket(): " + errno_text());
  if (::bind(state->listen_fd.get(), reinterpret_cast<sockaddr*>(&*tmp_addr), sizeof *tmp_addr) !=
      0)
    return fail("admin socket: cannot bind " + tmp + ": " + errno_text());
  if (::chmod(tmp.c_str(), 0600) != 0 || ::rename(tmp.c_str(), socket_path.c_str()) != 0) {
    std::string err = errno_text();
    ::unlink(tmp.c_str());
    return fail("admin socket: cannot install " + socket_path + ": " + err);
  }
  if (::listen(state->listen_fd.get(), 16) != 0) {
    std::string err = errno_text();
    ::unlink(socket_path.c_str());
    return fail("admin socket: listen: " + err);
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    std::string err = errno_text();
    ::unlink(socket_path.c_str());
    return fail("admin socket: pipe: " + err);
  }
  state->wake_read = Fd(pipefd[0]);
  state->wake_write = Fd(pipefd[1]);
  std::unique_ptr<AdminServer> server(new AdminServer());
  server->path_ = socket_path;
  State* raw = state.get();
  state->thread = std::thread([raw]() { raw->run(); });
  server->state_ = std::move(state);
  return server;
}

void AdminServer::stop() {
  if (!state_ || !state_->thread.joinable()) return;
  state_->stopping.store(true);
  char c = 1;
  // The pipe has room for this byte: it is the only write ever made to it.
  (void)!::write(state_->wake_write.get(), &c, 1);
  state_->thread.join();
  state_->listen_fd.reset();
  ::unlink(path_.c_str());
}

AdminServer::~AdminServer() {
  stop();
}

Result<std::string> admin_call(const std::string& socket_path, std::string_view request_json) {
  auto addr = unix_address(socket_path);
  if (!addr) return fail(addr.error());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return fail("admin socket: socket(): " + errno_text());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) != 0)
    return fail("cannot connect to admin socket " + socket_path + ": " + errno_text());
  set_timeouts(fd.get());
  std::string req(request_json);
  req += '\n';
  if (!write_all(fd.get(), req)) return fail("admin socket " + socket_path + ": send failed");
  std::string reply;
  if (!read_request(fd.get(), reply))
    return fail("admin socket " + socket_path + ": no complete reply: " + errno_text());
  return reply;
}

}  // namespace cordon::vault
