// Blocking Unix-socket server for AdminApi: one thread, one request per connection. Admin
// traffic is a handful of operator commands, so simplicity beats concurrency here; a slow
// client is cut off after kAdminIoTimeout so it cannot hold the thread.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/unix_socket.h"
#include "vault/admin.h"
#include "vault/limits.h"

namespace cordon::vault {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

struct AdminServer::State {
  AdminApi* api = nullptr;
  UniqueFd listen_fd;
  UniqueFd wake_read, wake_write;  // a pipe: writing to it wakes the poll loop for stop()
  std::atomic<bool> stopping{false};
  std::thread thread;

  void serve_one(int fd) {
    if (!peer_is_root_or_self(fd)) return;
    set_io_timeouts(fd, kAdminIoTimeout);  // nor can one that stops reading the reply
    auto request = read_line(fd, kMaxAdminRequestBytes, kAdminIoTimeout, /*eof_ends_line=*/true);
    if (!request) {
      (void)write_all(fd,
                      "{\"ok\":false,\"error\":\"request too large, truncated or timed out\"}\n");
      return;
    }
    (void)write_all(fd, api->handle(*request) + "\n");  // a client gone just misses its answer
  }

  void run() {
    for (;;) {
      pollfd fds[2] = {{listen_fd.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
      int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (stopping.load() || n < 0 || (fds[1].revents & POLLIN)) return;
      if (fds[0].revents & POLLIN) {
        UniqueFd client(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (client.get() >= 0) serve_one(client.get());
      }
    }
  }
};

Result<std::unique_ptr<AdminServer>> AdminServer::start(const std::string& socket_path,
                                                        AdminApi& api) {
  auto state = std::make_unique<State>();
  state->api = &api;
  auto listener = listen_unix(socket_path, 16);
  if (!listener) return fail("admin socket: " + listener.error().message);
  state->listen_fd = std::move(*listener);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    std::string err = errno_text();
    ::unlink(socket_path.c_str());
    return fail("admin socket: pipe: " + err);
  }
  state->wake_read = UniqueFd(pipefd[0]);
  state->wake_write = UniqueFd(pipefd[1]);
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
  auto fd = connect_unix(socket_path, kAdminIoTimeout);
  if (!fd) return fail("cannot reach the admin socket: " + fd.error().message);
  std::string req(request_json);
  req += '\n';
  if (!write_all(fd->get(), req)) return fail("admin socket " + socket_path + ": send failed");
  auto reply = read_line(fd->get(), kMaxAdminRequestBytes, kAdminIoTimeout, /*eof_ends_line=*/true);
  if (!reply)
    return fail("admin socket " + socket_path + ": no complete reply: " + reply.error().message);
  return *reply;
}

}  // namespace cordon::vault
