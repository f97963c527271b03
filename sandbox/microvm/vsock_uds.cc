// Host side of the vsock muxer; see vsock_uds.h.
#include "sandbox/microvm/vsock_uds.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace cordon::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Reads one line byte by byte: nothing past the newline may be consumed, because after the
// handshake's line the socket carries the guest's stream.
Result<std::string> read_line_exact(int fd, size_t max, Clock::time_point deadline,
                                    const std::string& what) {
  std::string line;
  while (line.size() <= max) {
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return fail(what + ": timed out waiting for a reply");
    if (n < 0) return fail(what + ": poll: " + strerror(errno));
    char c;
    ssize_t r = read(fd, &c, 1);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return fail(what + ": read: " + strerror(errno));
    if (r == 0) return fail(what + ": closed by the other side (no listener?)");
    if (c == '\n') return line;
    line += c;
  }
  return fail(what + ": reply line longer than " + std::to_string(max) + " bytes");
}

bool write_all_fd(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Result<int> vsock_uds_connect(const std::string& uds_path, uint32_t port, int timeout_ms) {
  std::string what = "vsock " + uds_path + " port " + std::to_string(port);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (uds_path.empty() || uds_path.size() >= sizeof a.sun_path)
    return fail(what + ": socket path empty or longer than " +
                std::to_string(sizeof a.sun_path - 1) + " bytes");
  std::memcpy(a.sun_path, uds_path.c_str(), uds_path.size());
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(what + ": socket: " + strerror(errno));
  // A blocking connect to a Unix listener whose backlog is full waits for as long as the
  // monitor does not accept (a stuck device thread): bound it, and the handshake's writes, with
  // the same deadline as the reply.
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int err = errno;
    close(fd);
    if (err == EAGAIN || err == EINPROGRESS)
      return fail(what + ": the monitor did not accept within " + std::to_string(timeout_ms) +
                  " ms");
    return fail(what + ": connect: " + strerror(err));
  }
  if (!write_all_fd(fd, "CONNECT " + std::to_string(port) + "\n")) {
    close(fd);
    return fail(what + ": the monitor closed the socket");
  }
  auto line = read_line_exact(fd, 64, deadline, what);
  if (!line) {
    close(fd);
    return fail(line.error());
  }
  if (line->rfind("OK ", 0) != 0) {
    close(fd);
    return fail(what + ": unexpected handshake reply '" + line->substr(0, 64) + "'");
  }
  tv = {};  // the stream itself is the caller's to bound
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

Result<std::string> vsock_uds_request(const std::string& uds_path, uint32_t port,
                                      const std::string& line, int timeout_ms, size_t max_reply) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto fd = vsock_uds_connect(uds_path, port, timeout_ms);
  if (!fd) return fail(fd.error());
  std::string what = "vsock " + uds_path + " port " + std::to_string(port);
  Result<std::string> reply = fail(what + ": the guest closed the connection");
  if (write_all_fd(*fd, line + "\n")) reply = read_line_exact(*fd, max_reply, deadline, what);
  close(*fd);
  return reply;
}

}  // namespace cordon::sandbox
