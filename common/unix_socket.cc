#include "common/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon {
namespace {

using Clock = std::chrono::steady_clock;

Result<sockaddr_un> address_of(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path)
    return fail("unix socket path '" + path + "' is empty or longer than " +
                std::to_string(sizeof sa.sun_path - 1) + " bytes");
  std::memcpy(sa.sun_path, path.data(), path.size());
  return sa;
}

std::string errno_text(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> listen_unix(const std::string& path, int backlog) {
  auto sa = address_of(path);
  if (!sa) return fail(sa.error());
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return fail(path + " exists and is not a socket; refusing to replace it");
    // A socket that still answers belongs to a running server: never steal it.
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe.valid() &&
        ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) == 0)
      return fail("another process is serving " + path);
    ::unlink(path.c_str());
  }
  // Bound under a temporary name, made 0600, then renamed into place: the path never exists
  // with a wider mode, and no process-wide umask is touched (other threads create files).
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  auto tmp_sa = address_of(tmp);
  if (!tmp_sa) return fail(tmp_sa.error());
  ::unlink(tmp.c_str());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fail(errno_text("socket for", path, errno));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*tmp_sa), sizeof *tmp_sa) != 0)
    return fail(errno_text("bind", tmp, errno));
  if (::chmod(tmp.c_str(), 0600) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(errno_text("install", path, err));
  }
  if (::listen(fd.get(), backlog) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    return fail(errno_text("listen on", path, err));
  }
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path, std::chrono::milliseconds timeout) {
  auto sa = address_of(path);
  if (!sa) return fail(sa.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fail(errno_text("socket for", path, errno));
  set_io_timeouts(fd.get(), timeout);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) != 0)
    return fail(errno_text("connect to", path, errno));
  return fd;
}

void set_io_timeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool peer_is_root_or_self(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == ::geteuid();
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

Result<std::string> read_line(int fd, size_t max_bytes, std::chrono::milliseconds timeout,
                              bool eof_ends_line) {
  auto deadline = Clock::now() + timeout;
  std::string line;
  char buf[4096];
  for (;;) {
    if (auto nl = line.find('\n'); nl != std::string::npos) {
      if (nl > max_bytes) break;
      line.resize(nl);
      return line;
    }
    if (line.size() > max_bytes) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return fail("no complete request line within " + std::to_string(timeout.count()) + " ms");
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return fail(std::string("poll: ") + std::strerror(errno));
    if (rc == 0) continue;  // the deadline check above ends it
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(std::string("recv: ") + std::strerror(errno));
    if (n == 0) {
      if (eof_ends_line && !line.empty() && line.size() <= max_bytes) return line;
      return fail("the peer closed the connection before a complete request line");
    }
    line.append(buf, static_cast<size_t>(n));
  }
  return fail("request line longer than " + std::to_string(max_bytes) + " bytes");
}

}  // namespace cordon
