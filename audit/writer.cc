// The audit writer: queue on the caller's side, one thread on the disk's side. See writer.h.
#include "audit/writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "audit/detail/files.h"
#include "audit/detail/format.h"
#include "audit/detail/json.h"
#include "common/encoding.h"
#include "common/file_io.h"

namespace cordon::audit {

using namespace detail;

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

struct Tail {
  uint64_t complete_end = 0;  // offset just after the last newline (0: none)
  std::optional<std::string> last_line;
};

Status pread_all(int fd, char* buf, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    ssize_t r = ::pread(fd, buf, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return fail("reading " + path + ": " + (r < 0 ? errno_text() : "unexpected EOF"));
    buf += r, n -= size_t(r), off += uint64_t(r);
  }
  return {};
}

// Finds the last newline of a file and the complete line before it, reading backwards.
Result<Tail> read_tail(int fd, uint64_t size, const std::string& path) {
  constexpr uint64_t kChunk = 65536;
  Tail t;
  std::string acc;  // the bytes [off, size)
  uint64_t off = size;
  std::optional<uint64_t> last_nl;
  for (;;) {
    if (!last_nl) {
      size_t p = acc.rfind('\n');
      if (p != std::string::npos) last_nl = off + p;
    }
    if (last_nl) {
      size_t rel = size_t(*last_nl - off);
      size_t q = rel == 0 ? std::string::npos : acc.rfind('\n', rel - 1);
      if (q != std::string::npos) {
        t.last_line = acc.substr(q + 1, rel - q - 1);
        break;
      }
      if (off == 0) {
        t.last_line = acc.substr(0, rel);
        break;
      }
      if (rel > kMaxLineBytes)
        return fail(path + ": the last line is over " + std::to_string(kMaxLineBytes) + " bytes");
    } else if (off == 0) {
      break;
    }
    uint64_t n = std::min(off, kChunk);
    off -= n;
    std::string chunk(n, '\0');
    if (auto s = pread_all(fd, chunk.data(), n, off, path); !s) return fail(s.error());
    acc.insert(0, chunk);
  }
  t.complete_end = last_nl ? *last_nl + 1 : 0;
  return t;
}

Result<std::string> sha256_range(int fd, uint64_t from, uint64_t to, const std::string& path) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buf(65536, '\0');
  for (uint64_t off = from; off < to;) {
    size_t n = size_t(std::min<uint64_t>(buf.size(), to - off));
    if (auto s = pread_all(fd, buf.data(), n, off, path); !s) {
      EVP_MD_CTX_free(ctx);
      return fail(s.error());
    }
    EVP_DigestUpdate(ctx, buf.data(), n);
    off += n;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return hex_encode(std::string(reinterpret_cast<char*>(md), len));
}

// The seq of a line that must be a well-formed audit line.
Result<uint64_t> seq_of_line(std::string_view line, const std::string& where) {
  std::vector<ScannedField> fields;
  if (const char* err = scan_object(line, fields))
    return fail(where + " is not a valid audit line (" + err +
                "); the log was altered or damaged: run 'cordon audit verify' and move it away");
  int i = find_field(fields, "seq");
  auto seq = i >= 0 ? to_int(fields[size_t(i)]) : std::nullopt;
  if (!seq || *seq <= 0 || find_field(fields, "prev") < 0)
    return fail(where + " has no valid seq/prev; run 'cordon audit verify'");
  return uint64_t(*seq);
}

// (seq, prev) of the first line of a file: what verify() sees as the head once the files
// before it are gone.
std::optional<std::pair<uint64_t, std::string>> first_anchor(const std::string& path) {
  auto reader = LineReader::open(path);
  if (!reader) return std::nullopt;
  std::string_view line;
  bool terminated = false;
  if (!(*reader)->next(line, terminated) || !terminated) return std::nullopt;
  std::vector<ScannedField> fields;
  if (scan_object(line, fields) != nullptr) return std::nullopt;
  int si = find_field(fields, "seq"), pi = find_field(fields, "prev");
  if (si < 0 || pi < 0) return std::nullopt;
  auto seq = to_int(fields[size_t(si)]);
  if (!seq || *seq <= 0) return std::nullopt;
  return std::make_pair(uint64_t(*seq), std::string(fields[size_t(pi)].raw));
}

}  // namespace

struct Writer::Impl {
  struct Pending {
    uint64_t seq;
    SystemTime ts;
    std::string body;
  };
  struct Line {
    uint64_t seq;
    std::string text;  // with newline
  };

  WriterOptions opt;
  std::string live_path;
  int dir_fd = -1;  // holds the flock
  int fd = -1;      // live file

  // Writer thread only (and open() before the thread starts).
  uint64_t file_size = 0;       // bytes of complete lines in the live file
  uint64_t file_first_seq = 0;  // 0 while the live file is empty
  std::string chain;            // prev of the next line
  std::deque<Line> unwritten;   // formatted, chained, not yet on disk
  bool need_truncate = false;   // a failed write may have left partial bytes past file_size
  bool dirty = false;           // written but not fsynced
  uint64_t last_written = 0;
  std::chrono::steady_clock::time_point last_fsync = std::chrono::steady_clock::now();
  std::string scratch;
  // Retention (writer thread): due at open and after a rotation; files planned for removal wait
  // until the audit_retention event naming their anchors (removal_seq) is durable.
  bool retention_due = true;
  std::vector<std::pair<std::string, uint64_t>> pending_removal;  // path, bytes
  uint64_t removal_seq = 0;

  // Read by disk_bytes() from any thread.
  std::atomic<uint64_t> rotated_bytes{0};
  std::atomic<uint64_t> live_bytes{0};

  // Shared, under mu.
  mutable std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::deque<Pending> queue;
  uint64_t next_seq = 1;
  uint64_t written_seq = 0;
  uint64_t durable_seq = 0;
  uint64_t flush_target = 0;
  bool closed = false;    // no more appends
  bool stopping = false;  // drain and exit
  bool abandon = false;   // exit now (close timed out)
  bool exited = false;
  bool healthy = true;
  std::string last_error;
  uint64_t lost = 0;
  WriterStats stats;
  std::thread thread;
  std::optional<Status> close_result;
  std::mutex close_mu;

  SystemTime now() const { return opt.clock ? opt.clock() : std::chrono::system_clock::now(); }

  void format_batch(std::vector<Pending>& batch) {
    for (auto& p : batch) {
      std::string line = format_line(p.ts, p.seq, p.body, chain);
      chain = line_hash(line);
      line += '\n';
      unwritten.push_back(Line{p.seq, std::move(line)});
    }
  }

  Status fsync_now() {
    if (::fdatasync(fd) != 0) return fail("fsync " + live_path + ": " + errno_text());
    dirty = false;
    last_fsync = std::chrono::steady_clock::now();
    std::lock_guard lock(mu);
    durable_seq = last_written;
    ++stats.fsyncs;
    return {};
  }

  Status rotate() {
    if (dirty) {
      if (auto s = fsync_now(); !s) return s;
    }
    std::string rotated = opt.dir + "/" + rotated_name(file_first_seq);
    std::string next = live_path + ".next";
    int new_fd = ::open(next.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (new_fd < 0) return fail("rotating: cannot create " + next + ": " + errno_text());
    if (::link(live_path.c_str(), rotated.c_str()) != 0) {
      int err = errno;
      struct stat a, b;
      bool same = err == EEXIST && ::stat(rotated.c_str(), &a) == 0 && ::fstat(fd, &b) == 0 &&
                  a.st_ino == b.st_ino && a.st_dev == b.st_dev;  // linked by an earlier attempt
      if (!same) {
        ::close(new_fd);
        return fail("rotating: cannot link " + live_path + " to " + rotated + ": " +
                    std::strerror(err));
      }
    }
    if (::rename(next.c_str(), live_path.c_str()) != 0) {
      std::string err = errno_text();
      ::close(new_fd);
      return fail("rotating: cannot rename " + next + " to " + live_path + ": " + err);
    }
    ::fsync(dir_fd);  // make the new names durable; the data itself already is
    ::close(fd);
    fd = new_fd;
    rotated_bytes += file_size;
    live_bytes = 0;
    retention_due = true;
    file_size = 0;
    file_first_seq = 0;
    std::lock_guard lock(mu);
    ++stats.rotations;
    return {};
  }

  Status write_unwritten() {
    while (!unwritten.empty()) {
      if (need_truncate) {
        if (::ftruncate(fd, off_t(file_size)) != 0)
          return fail("truncating a partial write in " + live_path + ": " + errno_text());
        need_truncate = false;
      }
      if (file_size > 0 && file_size + unwritten.front().text.size() > opt.rotate_bytes) {
        if (auto s = rotate(); !s) return s;
      }
      scratch.clear();
      size_t count = 0;
      for (const auto& l : unwritten) {
        if (count > 0 && file_size + scratch.size() + l.text.size() > opt.rotate_bytes) break;
        scratch += l.text;
        ++count;
      }
      size_t off = 0;
      while (off < scratch.size()) {
        ssize_t n =
            ::pwrite(fd, scratch.data() + off, scratch.size() - off, off_t(file_size + off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          std::string err = n < 0 ? errno_text() : "wrote nothing";
          need_truncate = true;  // the failed write may have left part of the batch behind
          return fail("writing " + live_path + ": " + err);
        }
        off += size_t(n);
      }
      if (file_first_seq == 0) file_first_seq = unwritten.front().seq;
      file_size += scratch.size();
      live_bytes = file_size;
      last_written = unwritten[count - 1].seq;
      unwritten.erase(unwritten.begin(), unwritten.begin() + long(count));
      dirty = true;
      std::lock_guard lock(mu);
      written_seq = last_written;
      stats.written += count;
      ++stats.batches;
    }
    return {};
  }

  void run() {
    std::vector<Pending> batch;
    for (;;) {
      bool want_sync;
      {
        std::unique_lock lock(mu);
        if (!healthy) {
          auto retry_at = std::chrono::steady_clock::now() + opt.retry_interval;
          work_cv.wait_until(lock, retry_at, [&] { return abandon; });
        } else {
          auto ready = [&] {
            return stopping || abandon || !queue.empty() || flush_target > durable_seq;
          };
          if (dirty) {
            work_cv.wait_until(lock, last_fsync + opt.fsync_interval, ready);
          } else {
            work_cv.wait(lock, ready);
          }
        }
        if (abandon) break;
        // Let a burst gather; appends during the window do not wake us (append() notifies only
        // an empty queue), flush() and close() do.
        if (healthy && !queue.empty() && opt.batch_delay.count() > 0) {
          work_cv.wait_for(lock, opt.batch_delay,
                           [&] { return stopping || abandon || flush_target > durable_seq; });
          if (abandon) break;
        }
        size_t n = std::min(queue.size(), opt.max_batch_events);
        batch.clear();
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue.front()));
          queue.pop_front();
        }
        want_sync = stopping || flush_target > durable_seq;
      }
      format_batch(batch);
      Status s = write_unwritten();
      if (s && dirty) {
        bool due = opt.fsync_interval.count() == 0 ||
                   std::chrono::steady_clock::now() - last_fsync >= opt.fsync_interval;
        if (due || want_sync) s = fsync_now();
      }
      if (s) retention_step();
      std::lock_guard lock(mu);
      if (s) {
        healthy = true;
        last_error.clear();
      } else {
        healthy = false;
        last_error = s.error().message;
        ++stats.write_failures;
      }
      done_cv.notify_all();
      if (stopping && queue.empty() && unwritten.empty() && !dirty) break;
    }
    std::lock_guard lock(mu);
    lost = queue.size() + unwritten.size();
    exited = true;
    done_cv.notify_all();
  }

  void retention_step() {
    if (!pending_removal.empty()) {
      uint64_t durable;
      {
        std::lock_guard lock(mu);
        durable = durable_seq;
      }
      if (durable < removal_seq) return;
      remove_planned();
      retention_due = true;  // a pass removes at most kMaxRemovedPerPass: look again
    }
    if (retention_due) {
      retention_due = false;
      plan_retention();
    }
  }

  // Oldest first, as verify() will then see heads: each intermediate state has its anchor.
  void remove_planned() {
    uint64_t removed = 0;
    for (const auto& [path, bytes] : pending_removal) {
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) break;  // retried at the next pass
      rotated_bytes -= std::min<uint64_t>(bytes, rotated_bytes);
      ++removed;
    }
    ::fsync(dir_fd);
    pending_removal.clear();
    std::lock_guard lock(mu);
    stats.removed_files += removed;
  }

  void plan_retention() {
    const RetentionOptions& r = opt.retention;
    if (r.max_total_bytes == 0 && r.max_age.count() == 0 && r.max_files == 0) return;
    struct File {
      uint64_t seq;
      std::string path;
      uint64_t bytes;
      std::filesystem::file_time_type mtime;
    };
    std::vector<File> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(opt.dir, ec)) {
      auto seq = rotated_seq(entry.path().filename().string());
      if (!seq) continue;
      std::error_code e1, e2;
      uint64_t bytes = entry.file_size(e1);
      auto mtime = entry.last_write_time(e2);
      if (e1 || e2) return;
      files.push_back({*seq, entry.path().string(), bytes, mtime});
    }
    if (ec || files.size() < 2) return;  // the newest rotated file is always kept
    std::sort(files.begin(), files.end(),
              [](const File& a, const File& b) { return a.seq < b.seq; });
    uint64_t total = file_size;
    for (const auto& f : files) total += f.bytes;
    size_t count = files.size() + 1;
    auto now_fs = std::filesystem::file_time_type::clock::now();
    size_t n = 0;
    std::string why;
    for (; n + 1 < files.size() && n < kMaxRemovedPerPass; ++n) {
      const File& f = files[n];
      const char* over = nullptr;
      if (r.max_total_bytes > 0 && total > r.max_total_bytes) {
        over = "max_total_bytes";
      } else if (r.max_files > 0 && count > std::max<size_t>(2, r.max_files)) {
        over = "max_files";
      } else if (r.max_age.count() > 0 && now_fs - f.mtime > r.max_age) {
        over = "max_age";
      }
      if (!over) break;
      if (why.find(over) == std::string::npos) why += why.empty() ? over : std::string(",") + over;
      total -= f.bytes;
      --count;
    }
    if (n == 0) return;
    std::string anchors;
    uint64_t removed_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      auto a = first_anchor(files[i + 1].path);
      if (!a) {
        n = i;  // a file we cannot anchor at: remove nothing past the last good anchor
        break;
      }
      if (!anchors.empty()) anchors += ',';
      anchors += std::to_string(a->first) + ":" + a->second;
      removed_bytes += files[i].bytes;
    }
    if (n == 0) return;
    Event e;
    e.event = "audit_retention";
    e.reason = "removed by retention (" + why + ")";
    e.add("removed_files", int64_t(n))
        .add("removed_bytes", int64_t(removed_bytes))
        .add("removed_through_seq", int64_t(files[n].seq - 1))
        .add("first_kept_seq", int64_t(files[n].seq))
        .add("anchors", anchors);
    auto body = format_body(e);
    if (!body) return;
    {
      std::lock_guard lock(mu);
      removal_seq = next_seq++;
      queue.push_back(Pending{removal_seq, now(), std::move(*body)});
      ++stats.accepted;
    }
    for (size_t i = 0; i < n; ++i) pending_removal.emplace_back(files[i].path, files[i].bytes);
  }

  Status open_files() {
    if (auto s = ensure_directory(opt.dir, 0700); !s) return s;
    dir_fd = ::open(opt.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return fail("cannot open audit directory " + opt.dir + ": " + errno_text());
    if (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0)
      return fail(
          "audit directory " + opt.dir + " is in use by another writer (" +
          (errno == EWOULDBLOCK ? std::string("is 'cordon serve' running?") : errno_text()) + ")");
    live_path = opt.dir + "/" + std::string(kLiveName);
    ::unlink((live_path + ".next").c_str());  // left over from an interrupted rotation

    std::vector<std::pair<uint64_t, std::string>> rotated;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(opt.dir, ec)) {
      if (auto seq = rotated_seq(entry.path().filename().string()))
        rotated.emplace_back(*seq, entry.path().string());
    }
    if (ec) return fail("listing " + opt.dir + ": " + ec.message());
    std::sort(rotated.begin(), rotated.end());
    for (const auto& [seq, path] : rotated) {
      struct stat rs;
      if (::stat(path.c_str(), &rs) == 0) rotated_bytes += uint64_t(rs.st_size);
    }

    // A crash between linking the rotated name and replacing the live file leaves two names
    // for one file: the rotation had happened, so the live name goes.
    struct stat live_st, rot_st;
    if (!rotated.empty() && ::stat(live_path.c_str(), &live_st) == 0 &&
        ::stat(rotated.back().second.c_str(), &rot_st) == 0 && live_st.st_ino == rot_st.st_ino &&
        live_st.st_dev == rot_st.st_dev)
      ::unlink(live_path.c_str());

    fd = ::open(live_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return fail("cannot open " + live_path + ": " + errno_text());
    ::fsync(dir_fd);  // the live file's name, if it was just created
    struct stat st;
    if (::fstat(fd, &st) != 0) return fail("cannot stat " + live_path + ": " + errno_text());
    uint64_t size = uint64_t(st.st_size);

    auto tail = read_tail(fd, size, live_path);
    if (!tail) return fail(tail.error());
    std::optional<Event> recovered;
    if (tail->complete_end < size) {
      // A final line without newline: the process died mid-write. Cut it, and say so.
      auto digest = sha256_range(fd, tail->complete_end, size, live_path);
      if (!digest) return fail(digest.error());
      uint64_t cut = size - tail->complete_end;
      if (::ftruncate(fd, off_t(tail->complete_end)) != 0 || ::fsync(fd) != 0)
        return fail("cutting the torn last line of " + live_path + ": " + errno_text());
      Event e;
      e.event = "audit_recovered";
      e.reason = "torn final line removed at open (unclean shutdown)";
      e.add("file", std::string(kLiveName))
          .add("cut_bytes", int64_t(cut))
          .add("cut_sha256", *digest)
          .add("offset", int64_t(tail->complete_end));
      recovered = std::move(e);
      stats.recovered_bytes = cut;
      size = tail->complete_end;
    }

    chain = std::string(kGenesisPrev);
    uint64_t last_seq = 0;
    if (tail->last_line) {
      auto seq = seq_of_line(*tail->last_line, live_path + " (last line)");
      if (!seq) return fail(seq.error());
      last_seq = *seq;
      chain = line_hash(*tail->last_line);
      auto first = first_seq_of(live_path);
      if (!first)
        return fail(live_path +
                    ": the first line is not a valid audit line; run "
                    "'cordon audit verify'");
      file_first_seq = *first;
    } else if (!rotated.empty()) {
      const std::string& path = rotated.back().second;
      int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (rfd < 0) return fail("cannot open " + path + ": " + errno_text());
      struct stat rst;
      ::fstat(rfd, &rst);
      auto rtail = read_tail(rfd, uint64_t(rst.st_size), path);
      ::close(rfd);
      if (!rtail) return fail(rtail.error());
      if (!rtail->last_line || rtail->complete_end != uint64_t(rst.st_size))
        return fail(path + " does not end with a complete line; run 'cordon audit verify'");
      auto seq = seq_of_line(*rtail->last_line, path + " (last line)");
      if (!seq) return fail(seq.error());
      last_seq = *seq;
      chain = line_hash(*rtail->last_line);
    }
    file_size = size;
    live_bytes = size;
    next_seq = last_seq + 1;
    written_seq = durable_seq = last_written = last_seq;
    if (recovered) {
      auto body = format_body(*recovered);
      if (!body) return fail(body.error());
      queue.push_back(Pending{next_seq++, now(), std::move(*body)});
      ++stats.accepted;
    }
    return {};
  }

  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (dir_fd >= 0) ::close(dir_fd);  // releases the flock
  }
};

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Writer>> Writer::open(WriterOptions options) {
  if (options.dir.empty()) return fail("audit writer: no directory given");
  if (options.queue_events == 0) options.queue_events = 1;
  if (options.max_batch_events == 0) options.max_batch_events = 1;
  if (options.rotate_bytes == 0) options.rotate_bytes = kDefaultRotateBytes;
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  if (auto s = impl->open_files(); !s) return fail(s.error());
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Writer>(new Writer(std::move(impl)));
}

Writer::~Writer() {
  (void)close(kDefaultCloseTimeout);
}

Result<uint64_t> Writer::append(const Event& e) {
  Impl& d = *impl_;
  auto body = format_body(e);
  std::unique_lock lock(d.mu);
  if (!body) {
    ++d.stats.refused;
    return fail(body.error());
  }
  if (d.closed) {
    ++d.stats.refused;
    return fail("audit writer is closed");
  }
  if (!d.healthy) {
    ++d.stats.refused;
    return fail("audit log cannot be written: " + d.last_error);
  }
  if (d.queue.size() >= d.opt.queue_events) {
    ++d.stats.refused;
    return fail("audit queue is full (" + std::to_string(d.queue.size()) +
                " events waiting for the disk)");
  }
  uint64_t seq = d.next_seq++;
  // A non-empty queue means the writer is awake, gathering a batch, or retrying: no need to
  // wake it (a futex call per request otherwise).
  bool wake = d.queue.empty();
  d.queue.push_back(Impl::Pending{seq, d.now(), std::move(*body)});
  ++d.stats.accepted;
  lock.unlock();
  if (wake) d.work_cv.notify_one();
  return seq;
}

Status Writer::flush(std::chrono::milliseconds timeout) {
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  uint64_t target = d.next_seq - 1;
  if (d.durable_seq >= target) return {};
  d.flush_target = std::max(d.flush_target, target);
  d.work_cv.notify_one();
  bool done =
      d.done_cv.wait_for(lock, timeout, [&] { return d.durable_seq >= target || d.exited; });
  if (d.durable_seq >= target) return {};
  std::string why = !d.healthy ? d.last_error : d.exited ? "the writer has stopped" : "";
  return fail("audit flush: " + std::to_string(target - d.durable_seq) + " events not yet durable" +
              (done ? "" : " after the timeout") + (why.empty() ? "" : ": " + why));
}

Status Writer::health() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->healthy) return {};
  return fail("audit log cannot be written: " + impl_->last_error);
}

WriterStats Writer::stats() const {
  std::lock_guard lock(impl_->mu);
  WriterStats s = impl_->stats;
  s.written_seq = impl_->written_seq;
  s.durable_seq = impl_->durable_seq;
  s.queued = impl_->next_seq - 1 - impl_->written_seq;
  s.healthy = impl_->healthy;
  s.disk_bytes = impl_->rotated_bytes.load() + impl_->live_bytes.load();
  return s;
}

uint64_t Writer::disk_bytes() const {
  return impl_->rotated_bytes.load() + impl_->live_bytes.load();
}

Status Writer::close(std::chrono::milliseconds timeout) {
  Impl& d = *impl_;
  std::lock_guard closing(d.close_mu);  // one closer joins the thread; others get its result
  std::unique_lock lock(d.mu);
  if (d.close_result) return *d.close_result;
  d.closed = true;
  d.stopping = true;
  d.work_cv.notify_one();
  if (!d.done_cv.wait_for(lock, timeout, [&] { return d.exited; })) {
    d.abandon = true;
    d.work_cv.notify_one();
  }
  lock.unlock();
  d.thread.join();
  lock.lock();
  if (d.lost > 0) {
    d.close_result = fail("audit writer closed with " + std::to_string(d.lost) +
                          " accepted events not written: " + d.last_error);
  } else {
    d.close_result = Status{};
  }
  return *d.close_result;
}

}  // namespace cordon::audit
