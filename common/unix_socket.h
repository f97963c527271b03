// Local control sockets (AF_UNIX, SOCK_STREAM) as every cordon daemon uses them: created 0600
// from birth, peers admitted only when they are root or the daemon's own user, one JSON line
// per request with a size bound and a deadline. One implementation for the steering service,
// the vault's admin socket, the sandbox manager's control socket and the monitor's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon {

// Owns a file descriptor; closes it once.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Binds and listens on PATH, mode 0600 from birth: the path never exists with a wider mode. A
// stale socket file there is replaced; a live one (a server answers) or a file that is not a
// socket is refused. Errors name the path.
Result<UniqueFd> listen_unix(const std::string& path, int backlog = 64);

// Connects to PATH; send and receive time out after `timeout`. Errors name the path.
Result<UniqueFd> connect_unix(const std::string& path, std::chrono::milliseconds timeout);

// Blocking send and receive on FD give up after `timeout` (a peer that stops reading or
// writing cannot hold a server thread).
void set_io_timeouts(int fd, std::chrono::milliseconds timeout);

// True when the connected peer runs as root or as this process's effective user. The file
// mode already limits who can connect; this also holds if the mode is ever loosened.
bool peer_is_root_or_self(int fd);

// Writes all of DATA (EINTR retried, no SIGPIPE). False when the peer went away.
bool write_all(int fd, std::string_view data);

// Reads up to the first '\n' (not included) within `timeout`; bytes after it are dropped (one
// request per connection). Fails on timeout, EOF before a newline (unless `eof_ends_line` and
// something was read), a socket error, or a line longer than `max_bytes`.
Result<std::string> read_line(int fd, size_t max_bytes, std::chrono::milliseconds timeout,
                              bool eof_ends_line = false);

}  // namespace cordon
