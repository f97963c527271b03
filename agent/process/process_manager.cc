#include "agent/process/process_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace cordon::agent::process {

using Clock = std::chrono::steady_clock;

namespace {

// A descriptor shared by the reader and writers, closed when the last holder lets go, so that
// a blocked SendInput never writes into a descriptor number that was closed and reused.
struct OwnedFd {
  explicit OwnedFd(int f) : fd(f) {}
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int fd;
};
using FdRef = std::shared_ptr<OwnedFd>;

struct Chunk {
  OutKind kind;
  std::string data;
};

constexpr int kStreams = 3;  // stdout, stderr, pty

Failure err(ErrorCode code, std::string msg) {
  return fail(std::move(msg), code);
}

}  // namespace

std::string Selector::describe() const {
  if (pid) return "process with pid " + std::to_string(*pid);
  if (tag) return "process with tag '" + *tag + "'";
  return "process (no selector)";
}

struct Watch {
  Process* proc;
  int which;
};

struct Process {
  uint32_t pid = 0;
  std::optional<std::string> tag;
  ::process::ProcessConfig config;
  bool is_pty = false;
  std::optional<Clock::time_point> deadline;

  std::mutex mu;
  std::condition_variable cv;
  FdRef input;          // stdin pipe, or the pty master
  FdRef out[kStreams];  // read ends being drained
  bool eof[kStreams] = {true, true, true};
  bool paused[kStreams] = {false, false, false};
  bool drained[kStreams] = {false, false, false};
  Watch watch[kStreams];

  std::deque<Chunk> ring;
  uint64_t first_seq = 0;  // sequence number of ring.front()
  size_t ring_bytes = 0;
  std::vector<uint64_t*> cursors;  // attached subscriptions

  bool exited = false;
  int wait_status = 0;
  Clock::time_point exit_time;
  bool ended = false;
  EndInfo end;
  bool resume_queued = false;
};

struct ProcessManager::Impl {
  explicit Impl(ProcessManager* o) : owner(o) {}
  ProcessManager* owner;
  int ep = -1;
  int wake_fd = -1;
  std::thread loop_thread;
  std::thread reaper_thread;
  std::atomic<bool> stop{false};
  std::atomic<size_t> total_bytes{0};

  // Table of live processes.
  mutable std::mutex mu;
  std::unordered_map<uint32_t, std::shared_ptr<Process>> procs;
  std::multimap<Clock::time_point, std::weak_ptr<Process>> deadlines;

  // Reaper bookkeeping; held across spawn so that a child that exits at once is still seen.
  std::mutex reaper_mu;
  std::set<pid_t> reap_pids;

  // Work handed to the loop thread.
  std::mutex q_mu;
  std::vector<std::pair<pid_t, int>> exits;
  std::vector<std::shared_ptr<Process>> resumes;

  // Loop-thread only.
  std::vector<std::shared_ptr<Process>> exited_pending;  // exited, output not yet drained
  std::vector<std::shared_ptr<Process>> repump;          // more to read right away
  std::vector<std::shared_ptr<Process>> graveyard;       // freed after the epoll batch
  std::string read_buf;

  void wake() {
    uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
  }

  bool over_budget(const Process& p) const {
    const auto& l = owner->limits_;
    if (p.ring_bytes >= l.ring_bytes_per_process) return true;
    return total_bytes.load() >= l.total_ring_bytes && p.ring_bytes >= l.ring_floor_bytes;
  }

  void drop_front(Process& p) {
    p.ring_bytes -= p.ring.front().data.size();
    total_bytes.fetch_sub(p.ring.front().data.size());
    p.ring.pop_front();
    ++p.first_seq;
  }

  // Drops chunks every attached reader has consumed. Caller holds p.mu.
  void trim(Process& p) {
    if (p.cursors.empty()) return;
    uint64_t min = UINT64_MAX;
    for (uint64_t* c : p.cursors) min = std::min(min, *c);
    while (!p.ring.empty() && p.first_seq < min) drop_front(p);
  }

  void request_resume(const std::shared_ptr<Process>& p) {
    {
      std::lock_guard lock(q_mu);
      resumes.push_back(p);
    }
    wake();
  }

  void epoll_del(Process& p, int which) {
    if (p.out[which]) ::epoll_ctl(ep, EPOLL_CTL_DEL, p.out[which]->fd, nullptr);
  }

  // Reads what is available on one stream of `p` (bounded per call). Loop thread only.
  void pump(const std::shared_ptr<Process>& sp, int which) {
    Process& p = *sp;
    for (int i = 0; i < 8; ++i) {
      int fd;
      {
        std::lock_guard lock(p.mu);
        if (p.ended || p.eof[which] || p.paused[which] || !p.out[which]) return;
        if (over_budget(p)) {
          if (!p.cursors.empty()) {
            // A reader is attached and behind: stop reading, the process blocks on its pipe.
            p.paused[which] = true;
            epoll_event ev{};
            ev.events = 0;
            ev.data.ptr = &p.watch[which];
            ::epoll_ctl(ep, EPOLL_CTL_MOD, p.out[which]->fd, &ev);
            return;
          }
          while (!p.ring.empty() && over_budget(p)) drop_front(p);
        }
        fd = p.out[which]->fd;
      }
      ssize_t n = ::read(fd, read_buf.data(), read_buf.size());
      if (n > 0) {
        std::lock_guard lock(p.mu);
        OutKind kind = which == 0   ? OutKind::kStdout
                       : which == 1 ? OutKind::kStderr
                                    : OutKind::kPty;
        p.ring.push_back(Chunk{kind, std::string(read_buf.data(), static_cast<size_t>(n))});
        p.ring_bytes += static_cast<size_t>(n);
        total_bytes.fetch_add(static_cast<size_t>(n));
        p.cv.notify_all();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(p.mu);
      if (n < 0 && errno == EAGAIN) {
        if (p.exited) p.drained[which] = true;
        return;
      }
      // EOF, or EIO on a pty master whose terminal side is closed.
      epoll_del(p, which);
      p.eof[which] = true;
      p.out[which].reset();
      return;
    }
    repump.push_back(sp);  // more may be waiting; level-triggered epoll would say so, but
                           // after the exit the drain must reach EAGAIN to finish
  }

  void pump_all(const std::shared_ptr<Process>& p) {
    for (int i = 0; i < kStreams; ++i) pump(p, i);
  }

  // Ends the process once it exited and its output is drained. Loop thread only.
  void try_finish(const std::shared_ptr<Process>& sp, Clock::time_point now) {
    Process& p = *sp;
    {
      std::lock_guard lock(p.mu);
      if (!p.exited || p.ended) return;
      bool grace_over = now - p.exit_time >= owner->limits_.exit_drain_grace;
      for (int i = 0; i < kStreams; ++i) {
        if (p.eof[i] || p.drained[i]) continue;
        // Past the grace only a reader-less stream is cut (a grandchild holding the pipe);
        // a paused one still carries what the process wrote before exiting.
        if (grace_over && !p.paused[i]) continue;
        return;
      }
    }
    // Out of the table before a reader can see the end, so that a List after the end never
    // shows the process. (The table lock is never taken under a process lock.) Only this
    // thread changes the state checked above, so it still holds below.
    {
      std::lock_guard lock(mu);
      auto it = procs.find(p.pid);
      if (it != procs.end() && it->second == sp) procs.erase(it);
    }
    std::lock_guard lock(p.mu);
    for (int i = 0; i < kStreams; ++i) {
      if (!p.eof[i]) epoll_del(p, i);
      p.out[i].reset();
      p.eof[i] = true;
    }
    p.input.reset();
    int st = p.wait_status;
    p.end.exited = WIFEXITED(st);
    p.end.exit_code = p.end.exited ? WEXITSTATUS(st) : -1;
    p.end.status = describe_wait_status(st);
    if (!(p.end.exited && p.end.exit_code == 0)) p.end.error = p.end.status;
    p.ended = true;
    p.cv.notify_all();
    graveyard.push_back(sp);
  }

  std::shared_ptr<Process> find_locked(const Selector& sel) const {
    if (sel.pid) {
      auto it = procs.find(*sel.pid);
      return it == procs.end() ? nullptr : it->second;
    }
    if (sel.tag) {
      std::shared_ptr<Process> best;
      for (const auto& [pid, p] : procs) {
        if (p->tag == sel.tag && (!best || p->pid > best->pid)) best = p;
      }
      return best;
    }
    return nullptr;
  }

  std::shared_ptr<Process> find(const Selector& sel) const {
    std::lock_guard lock(mu);
    return find_locked(sel);
  }

  int next_timeout_ms(Clock::time_point now) {
    if (!repump.empty()) return 0;
    Clock::time_point next = now + std::chrono::seconds(10);
    {
      std::lock_guard lock(mu);
      if (!deadlines.empty()) next = std::min(next, deadlines.begin()->first);
    }
    if (!exited_pending.empty()) next = std::min(next, now + std::chrono::milliseconds(100));
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    return ms < 0 ? 0 : static_cast<int>(ms) + 1;
  }

  void loop() {
    read_buf.resize(owner->limits_.chunk_bytes);
    epoll_event evs[64];
    while (!stop.load()) {
      int n = ::epoll_wait(ep, evs, 64, next_timeout_ms(Clock::now()));
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.ptr == nullptr) {
          uint64_t v;
          (void)!::read(wake_fd, &v, sizeof(v));
          continue;
        }
        auto* w = static_cast<Watch*>(evs[i].data.ptr);
        std::shared_ptr<Process> sp;
        {
          std::lock_guard lock(mu);
          auto it = procs.find(w->proc->pid);
          if (it != procs.end() && it->second.get() == w->proc) sp = it->second;
        }
        if (!sp) {
          for (const auto& g : graveyard) {
            if (g.get() == w->proc) sp = g;
          }
        }
        if (sp) pump(sp, w->which);
      }
      auto now = Clock::now();
      std::vector<std::shared_ptr<Process>> again;
      again.swap(repump);
      for (const auto& p : again) pump_all(p);

      std::vector<std::pair<pid_t, int>> ex;
      std::vector<std::shared_ptr<Process>> res;
      {
        std::lock_guard lock(q_mu);
        ex.swap(exits);
        res.swap(resumes);
      }
      for (auto [pid, status] : ex) {
        std::shared_ptr<Process> p = find(Selector{static_cast<uint32_t>(pid), std::nullopt});
        if (!p) continue;
        {
          std::lock_guard lock(p->mu);
          p->exited = true;
          p->wait_status = status;
          p->exit_time = now;
        }
        exited_pending.push_back(p);
        pump_all(p);
      }
      for (const auto& p : res) {
        {
          std::lock_guard lock(p->mu);
          p->resume_queued = false;
          for (int i = 0; i < kStreams; ++i) {
            if (!p->paused[i] || !p->out[i] || over_budget(*p)) continue;
            p->paused[i] = false;
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.ptr = &p->watch[i];
            ::epoll_ctl(ep, EPOLL_CTL_MOD, p->out[i]->fd, &ev);
          }
        }
        pump_all(p);
      }
      // Deadlines: kill the whole group; the end follows through the reaper.
      {
        std::lock_guard lock(mu);
        while (!deadlines.empty() && deadlines.begin()->first <= now) {
          if (auto p = deadlines.begin()->second.lock()) {
            std::lock_guard plock(p->mu);
            if (!p->exited) {
              if (::kill(-static_cast<pid_t>(p->pid), SIGKILL) != 0)
                ::kill(static_cast<pid_t>(p->pid), SIGKILL);
            }
          }
          deadlines.erase(deadlines.begin());
        }
      }
      std::vector<std::shared_ptr<Process>> pending;
      pending.swap(exited_pending);
      for (const auto& p : pending) {
        try_finish(p, now);
        std::lock_guard lock(p->mu);
        if (!p->ended) exited_pending.push_back(p);
      }
      graveyard.clear();
    }
  }

  void reaper() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    while (!stop.load()) {
      timespec ts{1, 0};
      ::sigtimedwait(&set, nullptr, &ts);
      std::vector<std::pair<pid_t, int>> found;
      {
        std::lock_guard lock(reaper_mu);
        for (auto it = reap_pids.begin(); it != reap_pids.end();) {
          int st = 0;
          pid_t r = ::waitpid(*it, &st, WNOHANG);
          if (r == *it) {
            found.emplace_back(r, st);
            it = reap_pids.erase(it);
          } else if (r < 0 && errno == ECHILD) {
            it = reap_pids.erase(it);  // reaped elsewhere; nothing to report
          } else {
            ++it;
          }
        }
        if (::getpid() == 1) {
          // As init, the agent also reaps orphans it never started.
          int st;
          while (::waitpid(-1, &st, WNOHANG) > 0) {
          }
        }
      }
      if (!found.empty()) {
        {
          std::lock_guard lock(q_mu);
          exits.insert(exits.end(), found.begin(), found.end());
        }
        wake();
      }
    }
  }
};

// --- Subscription ------------------------------------------------------------------------------

Subscription::Subscription(ProcessManager* mgr, std::shared_ptr<Process> proc)
    : mgr_(mgr), proc_(std::move(proc)) {
  std::lock_guard lock(proc_->mu);
  cursor_ = proc_->first_seq;
  proc_->cursors.push_back(&cursor_);
}

Subscription::~Subscription() {
  bool resume = false;
  {
    std::lock_guard lock(proc_->mu);
    auto& c = proc_->cursors;
    c.erase(std::remove(c.begin(), c.end(), &cursor_), c.end());
    mgr_->impl_->trim(*proc_);
    for (bool p : proc_->paused) resume |= p;
    if (resume && !proc_->resume_queued) {
      proc_->resume_queued = true;
    } else {
      resume = false;
    }
  }
  if (resume) mgr_->impl_->request_resume(proc_);
}

uint32_t Subscription::pid() const {
  return proc_->pid;
}

Subscription::Event Subscription::next(std::chrono::milliseconds timeout) {
  Event ev;
  bool resume = false;
  {
    std::unique_lock lock(proc_->mu);
    Process& p = *proc_;
    auto ready = [&] {
      return cursor_ < p.first_seq + p.ring.size() || (p.ended && !end_delivered_);
    };
    p.cv.wait_for(lock, timeout, ready);
    if (cursor_ < p.first_seq) cursor_ = p.first_seq;
    size_t idx = static_cast<size_t>(cursor_ - p.first_seq);
    if (idx < p.ring.size()) {
      // Coalesce consecutive chunks of one stream up to one data event.
      ev.type = Event::kData;
      ev.kind = p.ring[idx].kind;
      while (idx < p.ring.size() && p.ring[idx].kind == ev.kind &&
             ev.data.size() + p.ring[idx].data.size() <= mgr_->limits_.chunk_bytes) {
        ev.data += p.ring[idx].data;
        ++idx;
        ++cursor_;
      }
      mgr_->impl_->trim(p);
      for (bool paused : p.paused) resume |= paused;
      if (resume && !p.resume_queued && !mgr_->impl_->over_budget(p)) {
        p.resume_queued = true;
      } else {
        resume = false;
      }
    } else if (p.ended && !end_delivered_) {
      end_delivered_ = true;
      ev.type = Event::kEnd;
      ev.end = p.end;
    }
  }
  if (resume) mgr_->impl_->request_resume(proc_);
  return ev;
}

// --- ProcessManager ----------------------------------------------------------------------------

void ProcessManager::block_sigchld() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ProcessManager::ProcessManager(ManagerLimits limits)
    : limits_(limits), impl_(std::make_unique<Impl>(this)) {
  impl_->ep = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  ::epoll_ctl(impl_->ep, EPOLL_CTL_ADD, impl_->wake_fd, &ev);
  // The reaper must not see SIGCHLD as a default-ignored signal; block it in its thread too.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, &old);
  impl_->loop_thread = std::thread([this] { impl_->loop(); });
  impl_->reaper_thread = std::thread([this] { impl_->reaper(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ProcessManager::~ProcessManager() {
  std::vector<pid_t> pids;
  {
    std::lock_guard lock(impl_->reaper_mu);
    pids.assign(impl_->reap_pids.begin(), impl_->reap_pids.end());
    impl_->reap_pids.clear();
  }
  for (pid_t pid : pids) {
    if (::kill(-pid, SIGKILL) != 0) ::kill(pid, SIGKILL);
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  impl_->stop.store(true);
  impl_->wake();
  ::pthread_kill(impl_->reaper_thread.native_handle(), SIGCHLD);
  impl_->loop_thread.join();
  impl_->reaper_thread.join();
  ::close(impl_->ep);
  ::close(impl_->wake_fd);
}

Result<std::unique_ptr<Subscription>> ProcessManager::start(StartSpec spec) {
  if (live_processes() >= limits_.max_processes) {
    return err(kErrResourceExhausted,
               "too many processes (" + std::to_string(limits_.max_processes) + " running)");
  }
  auto proc = std::make_shared<Process>();
  proc->tag = spec.tag;
  proc->config = std::move(spec.config);
  proc->is_pty = spec.spawn.pty.has_value();
  proc->deadline = spec.deadline;
  auto sub = std::make_unique<Subscription>(this, proc);

  std::lock_guard reaper_lock(impl_->reaper_mu);
  auto spawned = spawn(spec.spawn);
  if (!spawned) {
    int e = spawned.error().code;
    ErrorCode code =
        (e == ENOENT || e == ENOTDIR || e == EACCES || e == EPERM) ? kErrInvalid : kErrInternal;
    return err(code, "starting " + spec.spawn.cmd + ": " + spawned.error().message);
  }
  proc->pid = static_cast<uint32_t>(spawned->pid);
  {
    std::lock_guard plock(proc->mu);
    auto setup = [&](int which, int fd) {
      proc->watch[which] = Watch{proc.get(), which};
      if (fd < 0) return;
      proc->out[which] = std::make_shared<OwnedFd>(fd);
      proc->eof[which] = false;
    };
    if (proc->is_pty) {
      auto master = std::make_shared<OwnedFd>(spawned->pty_master);
      proc->input = master;
      setup(0, -1);
      setup(1, -1);
      proc->watch[2] = Watch{proc.get(), 2};
      proc->out[2] = master;
      proc->eof[2] = false;
    } else {
      if (spawned->stdin_fd >= 0) proc->input = std::make_shared<OwnedFd>(spawned->stdin_fd);
      setup(0, spawned->stdout_fd);
      setup(1, spawned->stderr_fd);
      setup(2, -1);
    }
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->procs[proc->pid] = proc;
    if (proc->deadline) impl_->deadlines.emplace(*proc->deadline, proc);
  }
  {
    std::lock_guard plock(proc->mu);
    for (int i = 0; i < kStreams; ++i) {
      if (!proc->out[i]) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &proc->watch[i];
      ::epoll_ctl(impl_->ep, EPOLL_CTL_ADD, proc->out[i]->fd, &ev);
    }
  }
  impl_->reap_pids.insert(spawned->pid);
  impl_->wake();  // a new deadline may be the nearest
  return sub;
}

Result<std::unique_ptr<Subscription>> ProcessManager::connect(const Selector& sel) {
  auto p = impl_->find(sel);
  if (!p) return err(kErrNotFound, sel.describe() + " not found");
  {
    std::lock_guard lock(p->mu);
    if (p->ended) return err(kErrNotFound, sel.describe() + " not found");
  }
  return std::make_unique<Subscription>(this, p);
}

std::vector<ProcessInfo> ProcessManager::list() const {
  std::vector<ProcessInfo> out;
  std::lock_guard lock(impl_->mu);
  for (const auto& [pid, p] : impl_->procs) {
    out.push_back(ProcessInfo{pid, p->tag, p->config});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

Status ProcessManager::send_input(const Selector& sel, std::string_view data) {
  auto p = impl_->find(sel);
  if (!p) return err(kErrNotFound, sel.describe() + " not found");
  FdRef in;
  {
    std::lock_guard lock(p->mu);
    in = p->input;
  }
  if (!in) return err(kErrFailedPrecondition, "stdin of " + sel.describe() + " is not open");
  auto deadline = Clock::now() + limits_.stdin_write_timeout;
  while (!data.empty()) {
    ssize_t n = ::write(in->fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return err(kErrDeadline, "stdin of " + sel.describe() + " is full (not read)");
      pollfd pf{in->fd, POLLOUT, 0};
      ::poll(&pf, 1, static_cast<int>(std::min<long>(left, 1000)));
      continue;
    }
    return err(kErrFailedPrecondition,
               "writing stdin of " + sel.describe() + ": " + std::strerror(errno));
  }
  return {};
}

Status ProcessManager::close_stdin(const Selector& sel) {
  auto p = impl_->find(sel);
  if (!p) return err(kErrNotFound, sel.describe() + " not found");
  std::lock_guard lock(p->mu);
  if (p->is_pty) {
    // A terminal has no separate stdin to close: end-of-file is ^D in canonical mode.
    if (p->input) (void)!::write(p->input->fd, "\x04", 1);
    return {};
  }
  p->input.reset();
  return {};
}

Status ProcessManager::signal(const Selector& sel, int sig) {
  auto p = impl_->find(sel);
  if (!p) return err(kErrNotFound, sel.describe() + " not found");
  std::lock_guard lock(p->mu);
  if (p->exited) return {};  // reaped already; the end is on its way
  pid_t pid = static_cast<pid_t>(p->pid);
  if (::kill(-pid, sig) != 0 && ::kill(pid, sig) != 0) {
    return err(kErrInternal, "signalling " + sel.describe() + ": " + std::strerror(errno));
  }
  return {};
}

Status ProcessManager::resize(const Selector& sel, uint16_t cols, uint16_t rows) {
  auto p = impl_->find(sel);
  if (!p) return err(kErrNotFound, sel.describe() + " not found");
  std::lock_guard lock(p->mu);
  if (!p->is_pty) return err(kErrInvalid, sel.describe() + " has no pty to resize");
  if (!p->input) return err(kErrFailedPrecondition, "the pty of " + sel.describe() + " is closed");
  winsize ws{};
  ws.ws_col = cols;
  ws.ws_row = rows;
  if (::ioctl(p->input->fd, TIOCSWINSZ, &ws) != 0) {
    return err(kErrInternal, "resizing the pty of " + sel.describe() + ": " + std::strerror(errno));
  }
  return {};
}

size_t ProcessManager::buffered_bytes() const {
  return impl_->total_bytes.load();
}

size_t ProcessManager::live_processes() const {
  std::lock_guard lock(impl_->mu);
  return impl_->procs.size();
}

}  // namespace cordon::agent::process
