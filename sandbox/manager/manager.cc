// The sandbox lifecycle: create (cold or from the warm pool), pause/resume, kill, deadlines,
// metrics, the agent channel. Recovery after a restart is in recovery.cc.
#include "sandbox/manager/manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/crypto.h"
#include "common/encoding.h"
#include "common/file_io.h"
#include "sandbox/gvisor/gvisor_backend.h"
#include "sandbox/manager/agent_client.h"
#include "sandbox/manager/cgroup.h"
#include "sandbox/manager/detail/impl.h"
#include "sandbox/microvm/vsock_uds.h"

namespace cordon::sandbox {

int code(ManagerError e) {
  return static_cast<int>(e);
}

namespace {

using Clock = std::chrono::steady_clock;

Failure mfail(ManagerError e, std::string message) {
  return fail(std::move(message), code(e));
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Environment names the agent passes on: POSIX-portable names, bounded.
Status validate_env(const std::map<std::string, std::string>& env) {
  if (env.size() > 256) return mfail(ManagerError::kInvalidArgument, "more than 256 env vars");
  for (const auto& [k, v] : env) {
    bool ok = !k.empty() && k.size() <= 256 && !isdigit(static_cast<unsigned char>(k[0]));
    for (char c : k) ok = ok && (isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) return mfail(ManagerError::kInvalidArgument, "env var name '" + k + "' is invalid");
    if (v.size() > 32768 || v.find('\0') != std::string::npos)
      return mfail(ManagerError::kInvalidArgument, "env var '" + k + "': bad value");
  }
  return {};
}

Status validate_resources(const Resources& r) {
  if (r.cpu_millis < 50 || r.cpu_millis > 64000)
    return mfail(ManagerError::kInvalidArgument, "cpu_millis must be 50..64000");
  if (r.memory_bytes < (64ull << 20) || r.memory_bytes > (256ull << 30))
    return mfail(ManagerError::kInvalidArgument, "memory must be 64 MiB..256 GiB");
  if (r.pids < 8 || r.pids > 4096)
    return mfail(ManagerError::kInvalidArgument, "pids must be 8..4096");
  if (r.disk_bytes < (64ull << 20) || r.disk_bytes > (1ull << 40))
    return mfail(ManagerError::kInvalidArgument, "disk must be 64 MiB..1 TiB");
  return {};
}

bool same(const Resources& a, const Resources& b) {
  return a.cpu_millis == b.cpu_millis && a.memory_bytes == b.memory_bytes && a.pids == b.pids &&
         a.disk_bytes == b.disk_bytes;
}

std::string backend_name(BackendKind k) {
  return k == BackendKind::kMicrovm ? "microvm" : "gvisor";
}

}  // namespace

std::string default_name_prefix(const std::string& state_root) {
  std::error_code ec;
  // The same directory by any spelling (relative, trailing slash, symlink) gives one prefix.
  std::string abs = std::filesystem::weakly_canonical(state_root, ec).string();
  if (ec) abs = state_root;
  return "cdsb-" + hex_encode(sha256(abs)).substr(0, 8) + "-";
}

std::string make_sandbox_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string id;
  while (id.size() < 20) {
    for (unsigned char b : random_bytes(32)) {
      if (b >= 252) continue;  // 252 = 7 * 36: keeps every character equally likely
      id += kAlphabet[b % 36];
      if (id.size() == 20) break;
    }
  }
  return id;
}

// ---- helpers ------------------------------------------------------------------------------------

Result<std::unique_ptr<ScopedNetns>> Manager::Impl::enter_gateway() const {
  if (o.netns.empty()) return std::unique_ptr<ScopedNetns>();
  return ScopedNetns::enter(o.netns);
}

NetnsPool Manager::Impl::netns_pool() const {
  NetnsPool p;
  p.ipv4_cidr = o.ipv4_pool;
  p.ipv6 = o.ipv6;
  return p;
}

BackendSandbox Manager::Impl::backend_view(const StoredSandbox& s) const {
  BackendSandbox b;
  b.id = s.container_id.empty() ? s.record.id : s.container_id;
  b.dir = s.dir;
  b.netns_path = "/run/netns/" + s.netns;
  b.gateway_ipv4 = s.gateway_ipv4;
  b.gateway_ipv6 = s.gateway_ipv6;
  b.sandbox_ipv4 = s.record.address;
  b.cgroup = s.cgroup;
  b.resources = s.record.resources;
  return b;
}

Backend* Manager::Impl::backend_for(const std::string& name) const {
  if (name == "microvm") return microvm.get();
  return name == "gvisor" || name.empty() ? gvisor.get() : nullptr;
}

Status Manager::Impl::persist(const StoredSandbox& s) {
  return registry->put(s);
}

Status Manager::Impl::lease_template(const std::string& id, const TemplateInfo& t) {
  if (t.lock_file.empty()) return {};
  int fd = ::open(t.lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return fail("template " + t.id + ": open " + t.lock_file + ": " + std::strerror(errno));
  // LOCK_NB: an exclusive holder is TemplateStore::remove, which is deleting it right now.
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    int e = errno;
    ::close(fd);
    return fail("template " + t.id + " is being removed" +
                (e == EWOULDBLOCK ? std::string() : std::string(": ") + std::strerror(e)));
  }
  // remove() renames the template's directory away before deleting it: a lock taken on the
  // file after that protects nothing.
  struct stat by_fd {};
  struct stat by_path {};
  if (::fstat(fd, &by_fd) != 0 || ::stat(t.lock_file.c_str(), &by_path) != 0 ||
      by_fd.st_ino != by_path.st_ino || by_fd.st_dev != by_path.st_dev) {
    ::close(fd);
    return fail("template " + t.id + " was removed");
  }
  std::lock_guard lk(mu);
  if (auto it = template_leases.find(id); it != template_leases.end()) ::close(it->second);
  template_leases[id] = fd;
  return {};
}

void Manager::Impl::release_template(const std::string& id) {
  std::lock_guard lk(mu);
  auto it = template_leases.find(id);
  if (it == template_leases.end()) return;
  ::close(it->second);
  template_leases.erase(it);
}

Result<int> Manager::Impl::connect(const StoredSandbox& s, int timeout_ms) const {
  // A microVM's agent listens on vsock only, reached through its monitor's Unix socket.
  if (s.record.backend == "microvm")
    return vsock_uds_connect(microvm_vsock_path(s.dir), kAgentPort, timeout_ms);
  auto in = enter_gateway();
  if (!in) return fail(in.error());
  return tcp_connect(s.record.address, kAgentPort, timeout_ms);
}

Status Manager::Impl::wait_agent(const StoredSandbox& s, std::chrono::milliseconds timeout) const {
  auto deadline = Clock::now() + timeout;
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    auto fd = connect(s, 500);
    if (fd) {
      auto st = agent_health(*fd, 2000);
      if (st) return {};
      last = st.error().message;
    } else {
      last = fd.error().message;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fail("the agent did not answer /health within " + std::to_string(timeout.count()) +
              " ms (last: " + last + ")");
}

// /init doubles as the readiness probe: the first connection the agent accepts carries it (a
// separate /health first would cost a round trip through the guest's network stack).
Status Manager::Impl::init_agent(const StoredSandbox& s, const AgentInit& init,
                                 std::chrono::milliseconds timeout) const {
  auto deadline = Clock::now() + timeout;
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    auto fd = connect(s, 500);
    if (fd) return agent_init(*fd, init, 10000);
    last = fd.error().message;
    // Refused until the agent listens: answered at once, so a short pause suffices.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fail("the agent accepted no connection within " + std::to_string(timeout.count()) +
              " ms (last: " + last + ")");
}

// Makes the namespace, attaches the steering, starts the backend. A pooled sandbox is attached
// with no allowed source (everything it sends is dropped, nothing reaches it) and registered
// nowhere; activate() gives it its identity.
Result<StoredSandbox> Manager::Impl::prepare(const CreateSpec& spec, const TemplateInfo& t,
                                             bool pooled) {
  StoredSandbox s;
  SandboxRecord& r = s.record;
  r.id = make_sandbox_id();
  r.template_id = t.id;
  r.template_alias = t.alias;
  r.backend = backend_name(spec.backend);
  r.resources = spec.resources;
  r.envd_version = t.envd_version;
  r.started_at = std::chrono::system_clock::now();
  r.end_at = r.started_at + std::chrono::hours(24 * 365);
  s.phase = Phase::kCreating;
  s.node = node;
  s.netns = o.name_prefix + r.id;
  s.host_interface = host_ifname_for(s.netns);
  s.cgroup = "/cordon/" + s.netns;
  s.container_id = r.id;
  s.dir = sandboxes_dir + "/" + r.id;
  {
    std::lock_guard lk(mu);
    sandboxes[r.id] = s;
  }
  // The record exists before any resource: a crash from here on leaves something to reap.
  std::vector<std::string> undo_steps;
  auto undo = [&](const Error& e) -> Failure {
    (void)destroy(s);
    std::lock_guard lk(mu);
    sandboxes.erase(r.id);
    return mfail(ManagerError::kBackend, "create sandbox: " + e.message);
  };
  if (auto st = persist(s); !st) {
    std::lock_guard lk(mu);
    sandboxes.erase(r.id);
    return fail(st.error());
  }
  StepClock clock(o.on_step);
  if (auto st = ensure_directory(s.dir, 0700); !st) return undo(st.error());
  if (auto st = lease_template(r.id, t); !st) return undo(st.error());
  clock.mark("record");
  {
    auto in = enter_gateway();
    if (!in) return undo(in.error());
    auto ns = create_netns_sandbox(s.netns, netns_pool());
    if (!ns) return undo(ns.error());
    r.address = ns->sandbox_ipv4;
    s.ipv6 = ns->sandbox_ipv6;
    s.gateway_ipv4 = ns->host_ipv4;
    s.gateway_ipv6 = ns->host_ipv6;
  }
  clock.mark("netns");
  if (auto st = persist(s); !st) return undo(st.error());
  clock.mark("registry");
  // Confined before anything runs behind the interface.
  Status attached = pooled ? o.confinement->attach(r.id, s.host_interface, "", "")
                           : o.confinement->attach(r.id, s.host_interface, r.address, s.ipv6);
  if (!attached) return undo(attached.error());
  clock.mark("attach");
  if (!pooled) {
    r.profile = spec.profile;
    r.owner = spec.owner;
    r.network = spec.network;
    if (auto st = o.confinement->register_sandbox(r); !st) return undo(st.error());
  }
  Backend* backend = backend_for(r.backend);
  if (!backend) return undo(Error{"backend " + r.backend + " is not available"});
  BackendSandbox b = backend_view(s);
  b.rootfs_dir = t.rootfs_dir;
  b.rootfs_image = t.ext4_image;
  b.init_argv = o.agent_argv;
  b.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
           {"HOME", "/root"}};
  for (const auto& [k, v] : t.env) b.env[k] = v;
  clock.mark("register");
  auto started = backend->start(b);
  if (!started) return undo(started.error());
  clock.mark("backend");
  s.host_pids = started->host_pids;
  s.phase = pooled ? Phase::kPooled : Phase::kCreating;
  if (auto st = persist(s); !st) return undo(st.error());
  clock.mark("registry");
  {
    std::lock_guard lk(mu);
    sandboxes[r.id] = s;
  }
  return s;
}

// Identity, agent /init, deadline: the sandbox becomes usable.
Status Manager::Impl::activate(StoredSandbox& s, const CreateSpec& spec, const TemplateInfo& t) {
  SandboxRecord& r = s.record;
  r.profile = spec.profile;
  r.owner = spec.owner;
  r.network = spec.network;
  r.metadata = spec.metadata;
  r.env_vars = spec.env_vars;
  r.on_timeout = spec.on_timeout;
  r.envd_access_token = base64url_encode(random_bytes(24));
  StepClock clock(o.on_step);
  if (s.phase == Phase::kPooled) {
    // No registry write until the claim is done: a crash meanwhile leaves a kPooled record,
    // which recovery reaps just like a kCreating one.
    if (auto st = o.confinement->attach(r.id, s.host_interface, r.address, s.ipv6); !st) return st;
    clock.mark("claim.attach");
    s.phase = Phase::kCreating;  // registered from here on: destroy() unregisters it
    if (auto st = o.confinement->register_sandbox(r); !st) return st;
    clock.mark("claim.register");
  }
  AgentInit init;
  init.env_vars = t.env;  // the template's, then the caller's: never the host's
  for (const auto& [k, v] : spec.env_vars) init.env_vars[k] = v;
  init.access_token = r.envd_access_token;
  if (auto st = init_agent(s, init, o.agent_start_timeout); !st) return st;
  clock.mark("agent.init");
  r.started_at = std::chrono::system_clock::now();
  r.end_at = r.started_at + std::min(spec.timeout, o.max_timeout);
  r.state = SandboxState::kRunning;
  s.phase = Phase::kRunning;
  if (auto st = persist(s); !st) return st;
  clock.mark("registry");
  std::lock_guard lk(mu);
  sandboxes[r.id] = s;
  cv.notify_all();
  return {};
}

Status Manager::Impl::destroy(const StoredSandbox& s) {
  std::string errors;
  auto note = [&](const Status& st) {
    if (!st) errors += " " + st.error().message + ";";
  };
  if (Backend* b = backend_for(s.record.backend)) note(b->destroy(backend_view(s)));
  {
    auto in = enter_gateway();
    if (!in)
      note(fail(in.error()));
    else if (!s.netns.empty())
      note(delete_netns_sandbox(s.netns));
  }
  if (!s.host_interface.empty()) note(o.confinement->detach(s.host_interface));
  if (s.phase != Phase::kPooled) {
    auto st = o.confinement->unregister_sandbox(s.record.id);
    (void)st;  // absent after a crash before registration: nothing to undo
  }
  std::error_code ec;
  if (!s.dir.empty()) std::filesystem::remove_all(s.dir, ec);
  if (ec) errors += " remove " + s.dir + ": " + ec.message() + ";";
  // Only once nothing of the sandbox is left (its overlay's lower layer is the template).
  if (!errors.empty()) return fail("destroy " + s.record.id + ":" + errors);
  release_template(s.record.id);
  return registry->remove(s.record.id);
}

std::optional<StoredSandbox> Manager::Impl::claim(const std::string& alias,
                                                  const CreateSpec& spec) {
  if (!same(spec.resources, o.default_resources) || spec.backend == BackendKind::kMicrovm)
    return std::nullopt;
  std::lock_guard lk(mu);
  auto it = pool.find(alias);
  if (it == pool.end() || it->second.empty()) return std::nullopt;
  std::string id = it->second.front();
  it->second.erase(it->second.begin());
  claims_in_flight++;  // the pool thread refills once claims pause (create() ends the claim)
  auto s = sandboxes.find(id);
  if (s == sandboxes.end()) return std::nullopt;
  return s->second;
}

// ---- threads ------------------------------------------------------------------------------------

void Manager::Impl::deadline_loop() {
  std::unique_lock lk(mu);
  while (!stopping) {
    auto now = std::chrono::system_clock::now();
    std::optional<SystemTime> next;
    std::vector<StoredSandbox> due;
    for (auto& [id, s] : sandboxes) {
      if (s.phase != Phase::kRunning && s.phase != Phase::kPaused) continue;
      // A sandbox whose monitor process is gone (out of memory, crashed) is reaped.
      bool dead = !s.host_pids.empty() && ::kill(s.host_pids.front(), 0) != 0 && errno == ESRCH;
      if (dead) {
        s.record.on_timeout = TimeoutAction::kKill;
        due.push_back(s);
        continue;
      }
      if (s.phase != Phase::kRunning) continue;
      if (s.record.end_at <= now)
        due.push_back(s);
      else if (!next || s.record.end_at < *next)
        next = s.record.end_at;
    }
    if (!due.empty()) {
      for (auto& s : due) {
        sandboxes[s.record.id].phase =
            s.record.on_timeout == TimeoutAction::kPause ? Phase::kPaused : Phase::kDestroying;
      }
      lk.unlock();
      for (auto& s : due) {
        if (s.record.on_timeout == TimeoutAction::kPause) {
          Backend* b = backend_for(s.record.backend);
          Status st = b ? b->pause(backend_view(s)) : fail("no backend");
          std::lock_guard g(mu);
          auto it = sandboxes.find(s.record.id);
          if (it == sandboxes.end()) continue;
          it->second.phase = st ? Phase::kPaused : Phase::kRunning;
          it->second.record.state = st ? SandboxState::kPaused : SandboxState::kRunning;
          it->second.record.end_at =
              std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
          (void)persist(it->second);
        } else {
          s.phase = Phase::kDestroying;
          (void)persist(s);
          (void)destroy(s);
          std::lock_guard g(mu);
          sandboxes.erase(s.record.id);
        }
      }
      lk.lock();
      continue;
    }
    // Wake at least every 2 s for the liveness check above.
    auto wake = std::chrono::system_clock::now() + std::chrono::seconds(2);
    if (next && *next < wake) wake = *next;
    cv.wait_until(lk, wake);
  }
}

void Manager::Impl::pool_loop() {
  std::unique_lock lk(mu);
  while (!stopping) {
    std::string want;
    for (const auto& [alias, n] : o.warm_pool) {
      size_t have = pool[alias].size() + pool_filling[alias];
      if (have < n && sandboxes.size() < o.max_sandboxes) {
        want = alias;
        break;
      }
    }
    if (want.empty()) {
      cv.wait_for(lk, std::chrono::seconds(1));
      continue;
    }
    // A refill competes with the claims for the CPU and the steering service: it waits for a
    // pause in them (a burst of creates is served from the pool first, then refilled).
    if (claims_in_flight > 0) {
      cv.wait_for(lk, std::chrono::seconds(1));
      continue;
    }
    auto quiet = last_claim + kRefillQuietPeriod;
    if (Clock::now() < quiet) {
      cv.wait_until(lk, quiet);
      continue;
    }
    pool_filling[want]++;
    lk.unlock();
    Result<StoredSandbox> made = fail("no template");
    auto t = o.find_template(want);
    if (t) {
      CreateSpec spec;
      spec.template_name = want;
      spec.resources = o.default_resources;
      made = prepare(spec, *t, true);
    }
    lk.lock();
    pool_filling[want]--;
    if (made) {
      pool[want].push_back(made->record.id);
    } else {
      // A template that cannot be started is retried slowly, not in a tight loop.
      cv.wait_for(lk, std::chrono::seconds(5), [&] { return stopping; });
    }
  }
}

// ---- Manager ------------------------------------------------------------------------------------

Manager::Manager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Manager::~Manager() {
  std::vector<StoredSandbox> pooled;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  if (impl_->deadline_thread.joinable()) impl_->deadline_thread.join();
  if (impl_->pool_thread.joinable()) impl_->pool_thread.join();
  {
    std::lock_guard lk(impl_->mu);
    for (const auto& [alias, ids] : impl_->pool)
      for (const auto& id : ids)
        if (auto it = impl_->sandboxes.find(id); it != impl_->sandboxes.end())
          pooled.push_back(it->second);
  }
  // Pooled sandboxes were never handed out: they go with the manager.
  std::vector<std::thread> workers;
  for (const auto& s : pooled) workers.emplace_back([this, s] { (void)impl_->destroy(s); });
  for (auto& w : workers) w.join();
}

Result<SandboxRecord> Manager::create(const CreateSpec& spec_in) {
  CreateSpec spec = spec_in;
  if (spec.backend == BackendKind::kAuto) spec.backend = impl_->o.default_backend;
  Status microvm_ok = microvm_available(impl_->microvm_options);
  // auto: microvm where hardware virtualization can boot it, else gvisor.
  if (spec.backend == BackendKind::kAuto)
    spec.backend = microvm_ok ? BackendKind::kMicrovm : BackendKind::kGvisor;
  if (spec.backend == BackendKind::kMicrovm && !microvm_ok)
    return mfail(ManagerError::kInvalidArgument,
                 "microvm backend not available on this host: " + microvm_ok.error().message +
                     " (use --backend gvisor or auto)");
  if (spec.profile.empty()) return mfail(ManagerError::kInvalidArgument, "a profile is needed");
  if (auto st = validate_env(spec.env_vars); !st) return fail(st.error());
  if (auto st = validate_resources(spec.resources); !st) return fail(st.error());
  if (spec.timeout.count() <= 0)
    return mfail(ManagerError::kInvalidArgument, "timeout must be > 0");
  if (spec.timeout > impl_->o.max_timeout)
    return mfail(
        ManagerError::kInvalidArgument,
        "timeout above the maximum of " + std::to_string(impl_->o.max_timeout.count()) + " s");
  if (spec.metadata.size() > 64)
    return mfail(ManagerError::kInvalidArgument, "metadata: > 64 keys");
  auto t = impl_->o.find_template(spec.template_name);
  if (!t)
    return mfail(ManagerError::kInvalidArgument,
                 "template '" + spec.template_name + "': " + t.error().message);

  std::optional<StoredSandbox> s = impl_->claim(t->alias, spec);
  struct ClaimEnd {
    Impl* m;
    ~ClaimEnd() {
      if (!m) return;
      std::lock_guard lk(m->mu);
      m->claims_in_flight--;
      m->last_claim = std::chrono::steady_clock::now();
      m->cv.notify_all();
    }
  } claim_end{s ? impl_.get() : nullptr};
  if (!s) {
    std::lock_guard lk(impl_->mu);
    if (impl_->sandboxes.size() >= impl_->o.max_sandboxes)
      return mfail(ManagerError::kCapacity,
                   "at the sandbox limit (" + std::to_string(impl_->o.max_sandboxes) + ")");
  }
  if (!s) {
    auto made = impl_->prepare(spec, *t, false);
    if (!made) return fail(made.error());
    s = std::move(*made);
  }
  if (auto st = impl_->activate(*s, spec, *t); !st) {
    (void)impl_->destroy(*s);
    std::lock_guard lk(impl_->mu);
    impl_->sandboxes.erase(s->record.id);
    return mfail(ManagerError::kBackend, "create sandbox: " + st.error().message);
  }
  return s->record;
}

Result<SandboxRecord> Manager::get(std::string_view id) const {
  std::lock_guard lk(impl_->mu);
  auto it = impl_->sandboxes.find(std::string(id));
  if (it == impl_->sandboxes.end() ||
      (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
    return mfail(ManagerError::kNotFound, "no sandbox '" + std::string(id) + "'");
  return it->second.record;
}

std::vector<SandboxRecord> Manager::list() const {
  std::lock_guard lk(impl_->mu);
  std::vector<SandboxRecord> out;
  for (const auto& [id, s] : impl_->sandboxes)
    if (s.phase == Phase::kRunning || s.phase == Phase::kPaused) out.push_back(s.record);
  return out;
}

Status Manager::kill(std::string_view id_in) {
  std::string id(id_in);
  StoredSandbox s;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->sandboxes.find(id);
    if (it == impl_->sandboxes.end() ||
        (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
      return mfail(ManagerError::kNotFound, "no sandbox '" + id + "'");
    it->second.phase = Phase::kDestroying;
    s = it->second;
  }
  (void)impl_->persist(s);
  Status st = impl_->destroy(s);
  std::lock_guard lk(impl_->mu);
  impl_->sandboxes.erase(id);
  impl_->cpu.erase(id);
  impl_->cv.notify_all();
  if (!st) return mfail(ManagerError::kBackend, st.error().message);
  return {};
}

namespace {
// Pause and resume share everything but the direction.
Status change_pause(Manager::Impl& m, std::string_view id_in, bool to_paused) {
  std::string id(id_in);
  StoredSandbox s;
  {
    std::lock_guard lk(m.mu);
    auto it = m.sandboxes.find(id);
    if (it == m.sandboxes.end() ||
        (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
      return mfail(ManagerError::kNotFound, "no sandbox '" + id + "'");
    if ((it->second.phase == Phase::kPaused) == to_paused)
      return mfail(ManagerError::kConflict,
                   "sandbox '" + id + "' is " + (to_paused ? "already paused" : "not paused"));
    s = it->second;
    // A microVM's monitor exits within its pause: until the new pids are known (below), the
    // liveness check (deadline_loop) must not take that exit for a crash and reap the sandbox.
    it->second.host_pids.clear();
  }
  Backend* b = m.backend_for(s.record.backend);
  if (!b) return mfail(ManagerError::kBackend, "no backend " + s.record.backend);
  Status st = to_paused ? b->pause(m.backend_view(s)) : b->resume(m.backend_view(s));
  if (!st) {
    // Watch whatever runs now (the old monitor, after a failed pause).
    auto now = b->status(m.backend_view(s));
    std::lock_guard lk(m.mu);
    auto it = m.sandboxes.find(id);
    if (it != m.sandboxes.end() && now) it->second.host_pids = now->host_pids;
    return mfail(ManagerError::kBackend, st.error().message);
  }
  // A microVM's monitor ends with its pause and a new one resumes it: the liveness check
  // (deadline_loop) must watch the new one, or none.
  auto now = b->status(m.backend_view(s));
  std::lock_guard lk(m.mu);
  auto it = m.sandboxes.find(id);
  if (it == m.sandboxes.end())
    return mfail(ManagerError::kNotFound, "sandbox '" + id + "' is gone");
  if (now) it->second.host_pids = now->host_pids;
  it->second.phase = to_paused ? Phase::kPaused : Phase::kRunning;
  it->second.record.state = to_paused ? SandboxState::kPaused : SandboxState::kRunning;
  if (to_paused) {
    // A paused sandbox has no deadline until it is resumed (E2B: paused sandboxes persist).
    it->second.record.end_at = std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
  } else {
    it->second.record.end_at = std::chrono::system_clock::now() + std::chrono::seconds(300);
  }
  m.cv.notify_all();
  return m.persist(it->second);
}
}  // namespace

Status Manager::pause(std::string_view id) {
  return change_pause(*impl_, id, true);
}
Status Manager::resume(std::string_view id) {
  return change_pause(*impl_, id, false);
}

Status Manager::set_timeout(std::string_view id, std::chrono::seconds from_now) {
  if (from_now.count() <= 0 || from_now > impl_->o.max_timeout)
    return mfail(ManagerError::kInvalidArgument, "timeout out of range");
  std::lock_guard lk(impl_->mu);
  auto it = impl_->sandboxes.find(std::string(id));
  if (it == impl_->sandboxes.end() ||
      (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
    return mfail(ManagerError::kNotFound, "no sandbox '" + std::string(id) + "'");
  it->second.record.end_at = std::chrono::system_clock::now() + from_now;
  impl_->cv.notify_all();
  return impl_->persist(it->second);
}

Status Manager::set_network(std::string_view id, const NetworkOverlay& network) {
  StoredSandbox s;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->sandboxes.find(std::string(id));
    if (it == impl_->sandboxes.end() || it->second.phase == Phase::kPooled)
      return mfail(ManagerError::kNotFound, "no sandbox '" + std::string(id) + "'");
    s = it->second;
  }
  if (auto st = impl_->o.confinement->update_network(s.record.id, network); !st)
    return mfail(ManagerError::kBackend, st.error().message);
  std::lock_guard lk(impl_->mu);
  auto it = impl_->sandboxes.find(std::string(id));
  if (it == impl_->sandboxes.end()) return mfail(ManagerError::kNotFound, "sandbox is gone");
  it->second.record.network = network;
  return impl_->persist(it->second);
}

Result<SandboxMetrics> Manager::metrics(std::string_view id) const {
  StoredSandbox s;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->sandboxes.find(std::string(id));
    if (it == impl_->sandboxes.end() ||
        (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
      return mfail(ManagerError::kNotFound, "no sandbox '" + std::string(id) + "'");
    s = it->second;
  }
  SandboxMetrics m;
  m.at = std::chrono::system_clock::now();
  const Resources& r = s.record.resources;
  m.cpu_count = std::max<uint32_t>(1, (r.cpu_millis + 999) / 1000);
  m.mem_total = r.memory_bytes;
  m.mem_used = cgroup::memory_current(s.cgroup).value_or(0);
  m.mem_cache = cgroup::memory_file_bytes(s.cgroup).value_or(0);
  if (auto usage = cgroup::cpu_usage_ns(s.cgroup)) {
    auto now = Clock::now();
    std::lock_guard lk(impl_->mu);
    auto& prev = impl_->cpu[s.record.id];
    if (prev.at != Clock::time_point{} && *usage >= prev.usage_ns) {
      double wall_ns = std::chrono::duration<double, std::nano>(now - prev.at).count();
      if (wall_ns > 0)
        m.cpu_used_pct = 100.0 * double(*usage - prev.usage_ns) / wall_ns / m.cpu_count;
    }
    prev = {*usage, now};
  }
  if (Backend* b = impl_->backend_for(s.record.backend))
    if (auto d = b->disk_usage(impl_->backend_view(s))) {
      m.disk_used = d->first;
      m.disk_total = d->second;
    }
  return m;
}

Result<int> Manager::connect_agent(std::string_view id) const {
  StoredSandbox s;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->sandboxes.find(std::string(id));
    if (it == impl_->sandboxes.end() ||
        (it->second.phase != Phase::kRunning && it->second.phase != Phase::kPaused))
      return mfail(ManagerError::kNotFound, "no sandbox '" + std::string(id) + "'");
    if (it->second.phase == Phase::kPaused)
      return mfail(ManagerError::kConflict, "sandbox '" + std::string(id) + "' is paused");
    s = it->second;
  }
  auto fd = impl_->connect(s, 3000);
  if (!fd) return mfail(ManagerError::kBackend, fd.error().message);
  int flags = fcntl(*fd, F_GETFL);
  fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK);  // a plain blocking stream for the caller
  return *fd;
}

Result<int> Manager::exec(std::string_view id, const std::vector<std::string>& argv,
                          const ExecOutput& output, const std::string& user) {
  if (argv.empty()) return mfail(ManagerError::kInvalidArgument, "exec: empty command");
  auto rec = get(id);
  if (!rec) return fail(rec.error());
  auto fd = connect_agent(id);
  if (!fd) return fail(fd.error());
  AgentCommand cmd;
  cmd.argv = argv;
  cmd.user = user;
  cmd.access_token = rec->envd_access_token;
  cmd.timeout_ms = 3600 * 1000;
  int monitor = 0;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->sandboxes.find(std::string(id));
    if (it != impl_->sandboxes.end() && !it->second.host_pids.empty())
      monitor = it->second.host_pids.front();
  }
  if (monitor > 0) cmd.alive = [monitor] { return ::kill(monitor, 0) == 0; };
  auto r = agent_run(*fd, cmd, output.on_stdout, output.on_stderr);
  if (!r)
    return mfail(ManagerError::kBackend, "exec in " + std::string(id) + ": " + r.error().message);
  return *r;
}

Status Manager::kill_all() {
  std::vector<std::string> ids;
  {
    std::lock_guard lk(impl_->mu);
    for (const auto& [id, s] : impl_->sandboxes)
      if (s.phase == Phase::kRunning || s.phase == Phase::kPaused) ids.push_back(id);
  }
  std::string errors;
  std::mutex emu;
  std::vector<std::thread> workers;
  for (const auto& id : ids)
    workers.emplace_back([&, id] {
      if (auto st = kill(id); !st && st.error().code != code(ManagerError::kNotFound)) {
        std::lock_guard g(emu);
        errors += " " + st.error().message + ";";
      }
    });
  for (auto& w : workers) w.join();
  if (!errors.empty()) return mfail(ManagerError::kBackend, "kill_all:" + errors);
  return {};
}

std::map<std::string, uint32_t> Manager::pool_ready() const {
  std::lock_guard lk(impl_->mu);
  std::map<std::string, uint32_t> out;
  for (const auto& [alias, ids] : impl_->pool) out[alias] = static_cast<uint32_t>(ids.size());
  return out;
}

Result<std::unique_ptr<Manager>> Manager::open(ManagerOptions options) {
  auto impl = std::make_unique<Impl>();
  if (!options.confinement) return mfail(ManagerError::kInvalidArgument, "manager: no confinement");
  if (options.name_prefix.empty()) options.name_prefix = default_name_prefix(options.state.root);
  if (options.name_prefix.size() > 20)
    return mfail(ManagerError::kInvalidArgument, "manager: name_prefix must be 1..20 chars");
  if (!options.find_template) {
#ifdef CORDON_HAVE_TEMPLATES
    StateDir state = options.state;
    options.find_template = [state](const std::string& name) {
      return TemplateStore(state).find(name);
    };
#else
    return mfail(ManagerError::kInvalidArgument, "manager: no template store in this build");
#endif
  }
  impl->o = std::move(options);
  impl->node = host_name();
  if (auto st = ensure_directory(impl->o.state.root, 0700); !st) return fail(st.error());
  impl->sandboxes_dir = impl->o.state.root + "/sandboxes";
  if (auto st = ensure_directory(impl->sandboxes_dir, 0700); !st) return fail(st.error());
  auto reg = open_sqlite_registry(impl->o.state.root + "/sandboxes.db");
  if (!reg) return fail(reg.error());
  impl->registry = std::move(*reg);
  GvisorOptions g;
  g.runsc = impl->o.runsc;
  g.runsc_root = impl->o.state.root + "/runsc";
  g.on_step = impl->o.on_step;
  impl->gvisor = make_gvisor_backend(g);
  impl->microvm_options = microvm_default_options(impl->o.state.root);
  impl->microvm = make_microvm_backend(impl->microvm_options);
  if (auto st = impl->recover(); !st) return fail(st.error());
  Impl* raw = impl.get();
  impl->deadline_thread = std::thread([raw] { raw->deadline_loop(); });
  if (!impl->o.warm_pool.empty()) impl->pool_thread = std::thread([raw] { raw->pool_loop(); });
  return std::unique_ptr<Manager>(new Manager(std::move(impl)));
}

}  // namespace cordon::sandbox
