#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cordon {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

Result<std::string> read_fd(int fd, const std::string& path) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("reading " + path + ": " + errno_text(errno));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

}  // namespace

Result<std::string> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return fail("cannot open " + path + ": " + errno_text(errno));
  return read_fd(fd.get(), path);
}

Result<std::string> read_private_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return fail("cannot open " + path + ": " + errno_text(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail("cannot stat " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return fail(path + " is not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return fail(path + " has mode " + mode + "; a key file must be readable by its owner only " +
                "(chmod 600)");
  }
  return read_fd(fd.get(), path);
}

Status write_file_atomic(const std::string& path, std::string_view data, mode_t mode,
                         FileSync sync) {
  std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (fd.get() < 0) return fail("cannot create " + tmp + ": " + errno_text(errno));
  // The umask may have narrowed the mode; it must never widen it, and fchmod makes it exact.
  if (::fchmod(fd.get(), mode) != 0) return fail("cannot chmod " + tmp + ": " + errno_text(errno));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::unlink(tmp.c_str());
      return fail("writing " + tmp + ": " + errno_text(err));
    }
    off += size_t(n);
  }
  if (sync == FileSync::kFsync && ::fsync(fd.get()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail("fsync " + tmp + ": " + errno_text(err));
  }
  ::close(fd.release());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail("renaming " + tmp + " to " + path + ": " + errno_text(err));
  }
  return {};
}

Status ensure_directory(const std::string& dir, mode_t mode) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return {};
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail("cannot create directory " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), mode) != 0)
    return fail("cannot chmod " + dir + ": " + errno_text(errno));
  return {};
}

}  // namespace cordon
