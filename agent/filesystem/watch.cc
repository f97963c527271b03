#include "agent/filesystem/watch.h"

#include <dirent.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "agent/connect/connect.h"
#include "agent/filesystem/identity.h"
#include "agent/filesystem/paths.h"

namespace cordon::agent::filesystem {

using connect::Code;
using connect::RpcError;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO |
                           IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;

bool on_network_mount(const std::string& path) {
  struct statfs fs {};
  if (statfs(path.c_str(), &fs) != 0) return false;
  switch (static_cast<uint32_t>(fs.f_type)) {
    case 0x6969:      // NFS
    case 0xFF534D42:  // CIFS
    case 0x517B:      // SMB
    case 0xFE534D42:  // SMB2
    case 0x65735546:  // FUSE
      return true;
    default:
      return false;
  }
}

class Watcher {
 public:
  Watcher(http::Exchange& ex, const pb::WatchDirRequest& req, const WatchOptions& opts,
          std::string root, NameCache names)
      : stream_(ex), req_(req), opts_(opts), root_(std::move(root)), names_(std::move(names)) {}
  ~Watcher() {
    if (fd_ >= 0) close(fd_);
  }

  void run();

 private:
  // Adds watches for `rel` and, when recursive, every directory below it.
  std::optional<RpcError> add_tree(const std::string& rel);
  void remove_tree(const std::string& rel);
  // Handles one read's worth of events; an error or "stop" ends the stream.
  std::optional<RpcError> handle(const char* buf, size_t n, bool& stop);
  Status send_event(const std::string& name, pb::EventType type);
  Status send_keepalive();
  std::string full_path(const std::string& rel) const {
    return rel.empty() ? root_ : (root_ == "/" ? "/" + rel : root_ + "/" + rel);
  }

  connect::ServerStream stream_;
  const pb::WatchDirRequest& req_;
  const WatchOptions& opts_;
  std::string root_;
  int fd_ = -1;
  int root_wd_ = -1;
  std::map<int, std::string> dirs_;  // wd → directory relative to the root ("" = root)
  Clock::time_point last_send_ = Clock::now();
  NameCache names_;
};

std::optional<RpcError> Watcher::add_tree(const std::string& rel) {
  std::vector<std::string> todo{rel};
  while (!todo.empty()) {
    std::string cur = std::move(todo.back());
    todo.pop_back();
    if (dirs_.size() >= opts_.max_dirs)
      return RpcError{Code::kResourceExhausted, "watch on " + root_ + " would need more than " +
                                                    std::to_string(opts_.max_dirs) +
                                                    " directory watches"};
    std::string path = full_path(cur);
    int wd = inotify_add_watch(fd_, path.c_str(),
                               kMask | IN_ONLYDIR | (cur.empty() ? 0u : IN_DONT_FOLLOW));
    if (wd < 0) {
      int err = errno;
      if (cur.empty()) return errno_error(err, "watching '" + path + "'");
      if (err == ENOSPC)
        return RpcError{Code::kResourceExhausted,
                        "inotify watch limit reached while watching " + root_};
      continue;  // vanished or unreadable subdirectory: not watched
    }
    if (cur.empty()) root_wd_ = wd;
    dirs_[wd] = cur;
    if (!req_.recursive()) continue;
    DIR* d = opendir(path.c_str());
    if (!d) continue;
    while (dirent* de = readdir(d)) {
      std::string_view n = de->d_name;
      if (n == "." || n == "..") continue;
      bool is_dir = de->d_type == DT_DIR;
      if (de->d_type == DT_UNKNOWN) {
        struct stat st {};
        is_dir = lstat((path + "/" + std::string(n)).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      }
      if (is_dir) todo.push_back(cur.empty() ? std::string(n) : cur + "/" + std::string(n));
    }
    closedir(d);
  }
  return std::nullopt;
}

void Watcher::remove_tree(const std::string& rel) {
  for (auto it = dirs_.begin(); it != dirs_.end();) {
    const std::string& d = it->second;
    if (d == rel || (d.size() > rel.size() && d.starts_with(rel) && d[rel.size()] == '/')) {
      inotify_rm_watch(fd_, it->first);
      it = dirs_.erase(it);
    } else {
      ++it;
    }
  }
}

Status Watcher::send_event(const std::string& name, pb::EventType type) {
  pb::WatchDirResponse msg;
  auto* ev = msg.mutable_filesystem();
  ev->set_name(name);
  ev->set_type(type);
  bool carries_entry =
      type == pb::EVENT_TYPE_CREATE || type == pb::EVENT_TYPE_WRITE || type == pb::EVENT_TYPE_CHMOD;
  if (req_.include_entry() && carries_entry) {
    // Best effort, as envd: the entry may be gone already.
    if (auto e = stat_entry(full_path(name == "." ? "" : name), names_))
      *ev->mutable_entry() = std::move(*e);
  }
  last_send_ = Clock::now();
  return stream_.send(msg);
}

Status Watcher::send_keepalive() {
  pb::WatchDirResponse msg;
  msg.mutable_keepalive();
  last_send_ = Clock::now();
  return stream_.send(msg);
}

std::optional<RpcError> Watcher::handle(const char* buf, size_t n, bool& stop) {
  size_t off = 0;
  while (off + sizeof(inotify_event) <= n) {
    inotify_event ev;
    std::memcpy(&ev, buf + off, sizeof(ev));  // the buffer is not aligned for inotify_event
    std::string_view raw_name(buf + off + sizeof(inotify_event), ev.len);
    off += sizeof(inotify_event) + ev.len;
    std::string name(raw_name.substr(0, raw_name.find('\0')));
    if (ev.mask & IN_Q_OVERFLOW)
      return RpcError{Code::kResourceExhausted,
                      "too many filesystem events under " + root_ +
                          ": the event queue overflowed (client too slow); watch again"};
    auto it = dirs_.find(ev.wd);
    if (ev.mask & IN_IGNORED) {
      if (it != dirs_.end()) dirs_.erase(it);
      if (ev.wd == root_wd_) stop = true;  // the watched directory is gone
      continue;
    }
    if (it == dirs_.end()) continue;
    bool self = (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) != 0;
    if (!self && std::string_view(name).starts_with(kUploadTempPrefix)) continue;
    // A subdirectory's own removal is reported by its parent's watch already.
    if (self && ev.wd != root_wd_) continue;
    std::string rel = self ? "." : (it->second.empty() ? name : it->second + "/" + name);
    if (req_.recursive() && (ev.mask & IN_ISDIR) && !self) {
      if (ev.mask & IN_MOVED_FROM) remove_tree(rel);
      if (ev.mask & (IN_CREATE | IN_MOVED_TO))
        if (auto e = add_tree(rel)) return e;
    }
    const std::pair<uint32_t, pb::EventType> kOrder[] = {
        {IN_CREATE | IN_MOVED_TO, pb::EVENT_TYPE_CREATE},
        {IN_MOVE_SELF | IN_MOVED_FROM, pb::EVENT_TYPE_RENAME},
        {IN_ATTRIB, pb::EVENT_TYPE_CHMOD},
        {IN_MODIFY, pb::EVENT_TYPE_WRITE},
        {IN_DELETE | IN_DELETE_SELF, pb::EVENT_TYPE_REMOVE},
    };
    for (auto& [bits, type] : kOrder) {
      if (!(ev.mask & bits)) continue;
      if (!send_event(rel, type)) {
        stop = true;  // the client is gone; nobody to tell
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

void Watcher::run() {
  fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) {
    (void)stream_.finish(errno_error(errno, "creating inotify watcher"));
    return;
  }
  if (auto e = add_tree("")) {
    (void)stream_.finish(*e);
    return;
  }
  pb::WatchDirResponse start;
  start.mutable_start();
  last_send_ = Clock::now();
  if (!stream_.send(start)) return;

  alignas(inotify_event) static thread_local char buf[kWatchReadBufferBytes];
  http::Exchange& ex = stream_.exchange();
  for (;;) {
    auto now = Clock::now();
    if (opts_.deadline && now >= *opts_.deadline) {
      (void)stream_.finish(RpcError{Code::kDeadlineExceeded, "watch deadline exceeded"});
      return;
    }
    if (now - last_send_ >= opts_.keepalive) {
      if (!send_keepalive()) return;
    }
    if (ex.client_gone()) return;
    auto wait = std::chrono::milliseconds(kWatchPollMs);
    auto until_keepalive =
        std::chrono::duration_cast<std::chrono::milliseconds>(last_send_ + opts_.keepalive - now);
    wait = std::max(std::chrono::milliseconds(1), std::min(wait, until_keepalive));
    if (opts_.deadline) {
      auto until_deadline =
          std::chrono::duration_cast<std::chrono::milliseconds>(*opts_.deadline - now);
      wait = std::max(std::chrono::milliseconds(1), std::min(wait, until_deadline));
    }
    pollfd p{fd_, POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(wait.count()));
    if (pr < 0 && errno != EINTR) {
      (void)stream_.finish(errno_error(errno, "waiting for filesystem events"));
      return;
    }
    if (pr <= 0) continue;
    ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      (void)stream_.finish(errno_error(errno, "reading filesystem events"));
      return;
    }
    bool stop = false;
    if (auto e = handle(buf, static_cast<size_t>(n), stop)) {
      (void)stream_.finish(*e);
      return;
    }
    if (stop) {
      (void)stream_.finish();
      return;
    }
  }
}

}  // namespace

void watch_dir(http::Exchange& ex, const FsContext& ctx, const pb::WatchDirRequest& req,
               const WatchOptions& opts) {
  auto fail_stream = [&](const RpcError& e) {
    connect::ServerStream s(ex);
    (void)s.finish(e);
  };
  auto path = resolve_path(req.path(), ctx.user, ctx.default_workdir);
  if (!path) return fail_stream(RpcError{Code::kInvalidArgument, path.error().message});
  UserScope scope(ctx.user);
  if (!scope.status())
    return fail_stream(RpcError{Code::kPermissionDenied, scope.status().error().message});
  struct stat st {};
  if (::stat(path->c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT)
      return fail_stream(RpcError{Code::kNotFound, "path " + *path + " not found"});
    return fail_stream(errno_error(err, "stat '" + *path + "'"));
  }
  if (!S_ISDIR(st.st_mode))
    return fail_stream(RpcError{Code::kInvalidArgument, "path " + *path + " is not a directory"});
  if (!req.allow_network_mounts() && on_network_mount(*path))
    return fail_stream(
        RpcError{Code::kInvalidArgument, "cannot watch path on network filesystem: " + *path});
  Watcher w(ex, req, opts, *path, ctx.names());
  w.run();
}

}  // namespace cordon::agent::filesystem
