#include "agent/files/upload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "agent/filesystem/entry_info.h"
#include "agent/filesystem/fs_ops.h"
#include "agent/filesystem/limits.h"
#include "agent/filesystem/paths.h"

namespace cordon::agent::files {

namespace fs = cordon::agent::filesystem;

int http_status_for_errno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return 507;
    case EACCES:
    case EPERM:
    case EROFS:
      return 403;
    case EISDIR:
    case ENOTDIR:
    case ENAMETOOLONG:
    case EINVAL:
    case ELOOP:
      return 400;
    default:
      return 500;
  }
}

namespace {
Failure io_fail(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg = "not enough disk space available (" + msg + ")";
  return fail(msg, http_status_for_errno(err));
}
}  // namespace

FileWriter::FileWriter(FileWriter&& o) noexcept
    : fd_(o.fd_),
      target_(std::move(o.target_)),
      temp_(std::move(o.temp_)),
      committed_(o.committed_),
      written_(o.written_) {
  o.fd_ = -1;
  o.temp_.clear();
  o.committed_ = true;
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temp_.empty()) unlink(temp_.c_str());
}

Result<FileWriter> FileWriter::open(const std::string& requested) {
  FileWriter w;
  w.target_ = requested;
  struct stat st {};
  bool exists = false;
  if (lstat(requested.c_str(), &st) == 0) {
    exists = true;
    if (S_ISLNK(st.st_mode)) {
      // Write through the link, as envd's open(O_TRUNC) does, keeping the link intact.
      char real[PATH_MAX];
      if (realpath(requested.c_str(), real) != nullptr && ::stat(real, &st) == 0) {
        w.target_ = real;
      } else {
        exists = false;  // dangling: replaced by the new file
      }
    }
    if (exists && S_ISDIR(st.st_mode)) return fail("path is a directory: " + requested, 400);
  } else if (errno != ENOENT) {
    return io_fail("stat '" + requested + "'", errno);
  }
  std::string dir = fs::dir_name(w.target_);
  if (auto s = fs::make_dirs(dir); !s) {
    if (s.error().code == ENOTDIR) return fail(s.error().message, 400);
    return io_fail("creating directory '" + dir + "'", s.error().code);
  }
  bool in_place = exists && !S_ISREG(st.st_mode);
  if (!in_place) {
    std::string tmpl =
        (dir == "/" ? std::string() : dir) + "/" + std::string(fs::kUploadTempPrefix) + "XXXXXX";
    int fd = mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd >= 0) {
      w.fd_ = fd;
      w.temp_ = tmpl;
      mode_t mode = exists ? (st.st_mode & 07777) : 0644;
      if (fchmod(fd, mode) != 0) return io_fail("chmod '" + tmpl + "'", errno);
      return w;
    }
    int err = errno;
    if (!(exists && (err == EACCES || err == EPERM)))
      return io_fail("creating a file in '" + dir + "'", err);
    // The user may write the file but not its directory: write in place (not atomic).
  }
  int fd = ::open(w.target_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_CREAT, 0644);
  if (fd < 0) return io_fail("opening '" + w.target_ + "'", errno);
  w.fd_ = fd;
  return w;
}

Status FileWriter::write(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_fail("writing '" + target_ + "'", errno);
    }
    bytes.remove_prefix(n);
    written_ += n;
  }
  return {};
}

Status FileWriter::commit(const std::map<std::string, std::string>& metadata) {
  if (auto s = fs::write_metadata(fd_, metadata); !s) {
    if (s.error().code == ENOSPC || s.error().code == EDQUOT)
      return io_fail("storing metadata of '" + target_ + "'", s.error().code);
    return fail(s.error().message, s.error().code ? 500 : 400);
  }
  if (!temp_.empty()) {
    if (rename(temp_.c_str(), target_.c_str()) != 0)
      return io_fail("renaming into '" + target_ + "'", errno);
    committed_ = true;
    // A same-size truncate through the still-open fd: watchers of the directory then see a
    // write event under the final name, as with envd's in-place writes (the rename alone
    // shows only as a create).
    if (ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
      // Only the watchers' write event is lost; the file is complete.
    }
  }
  committed_ = true;
  int rc = close(fd_);
  fd_ = -1;
  if (rc != 0) return io_fail("closing '" + target_ + "'", errno);
  return {};
}

}  // namespace cordon::agent::files
