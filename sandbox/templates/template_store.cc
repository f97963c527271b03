// The template store. Layout under <state>/templates/:
//   .lock                    serializes builds and removals (readers take no lock)
//   aliases/<name>           symlink -> ../<id>, swapped with rename(2)
//   layers/<layer>/rootfs/   mmdebstrap's output for one package set (shared by templates)
//   <id>/rootfs/ rootfs.ext4 manifest.json lock
//   .tmp-*/, layers/.tmp-*/  builds in progress; while .lock is held, any of them is stale
// A template is a copy of its layer (cp --reflink=auto) customized by a generated script, so a
// new agent or CA rebuilds in seconds instead of re-running mmdebstrap.
#include "sandbox/templates/template_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/file_io.h"
#include "sandbox/templates/detail/fs.h"
#include "sandbox/templates/detail/process.h"
#include "sandbox/templates/detail/recipe.h"

namespace cordon::sandbox {
namespace fs = std::filesystem;
using detail::FileLock;

namespace {

using Clock = std::chrono::steady_clock;
using Progress = std::function<void(const std::string&)>;

Failure error(TemplateError code, const std::string& message) {
  return fail(message, int(code));
}

// The last `n` lines of a command's output, for error messages.
std::string last_lines(const std::string& text, size_t n) {
  size_t pos = text.size();
  while (pos > 0 && (text[pos - 1] == '\n' || text[pos - 1] == ' ')) --pos;
  size_t end = pos;
  for (size_t count = 0; pos > 0; --pos)
    if (text[pos - 1] == '\n' && ++count == n) break;
  return text.substr(pos, end - pos);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Removes a directory on every exit path unless release()d.
class TmpDir {
 public:
  explicit TmpDir(std::string path) : path_(std::move(path)) {}
  ~TmpDir() {
    if (!path_.empty()) (void)detail::remove_tree(path_);
  }
  TmpDir(const TmpDir&) = delete;
  TmpDir& operator=(const TmpDir&) = delete;
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

struct Paths {
  std::string root;  // <state>/templates
  std::string aliases() const { return root + "/aliases"; }
  std::string layers() const { return root + "/layers"; }
  std::string lock() const { return root + "/.lock"; }
  std::string dir(const std::string& id) const { return root + "/" + id; }
};

Paths paths_of(const StateDir& state) {
  return Paths{state.root + "/templates"};
}

std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

Status remove_stale(const std::string& dir, const Progress& progress) {
  for (const auto& name : list_names(dir)) {
    if (name.rfind(".tmp-", 0) != 0) continue;
    if (progress) progress("removing " + dir + "/" + name + " left by an interrupted build");
    if (auto st = detail::remove_tree(dir + "/" + name); !st) return st;
  }
  return {};
}

Result<detail::Manifest> load_manifest(const Paths& p, const std::string& id) {
  std::string path = p.dir(id) + "/manifest.json";
  auto text = read_file(path);
  if (!text) return error(TemplateError::kNotFound, "no template " + id);
  auto m = detail::manifest_from_json(*text, path);
  if (!m) return fail(m.error());
  TemplateInfo& i = m->info;
  i.dir = p.dir(id);
  i.rootfs_dir = i.dir + "/rootfs";
  i.ext4_image = i.dir + "/rootfs.ext4";
  i.lock_file = i.dir + "/lock";
  i.current = detail::read_alias(p.aliases(), i.alias) == id;
  return m;
}

// Layers no manifest refers to any more.
void collect_layers(const Paths& p) {
  std::set<std::string> used;
  for (const auto& name : list_names(p.root))
    if (detail::valid_template_id(name))
      if (auto m = load_manifest(p, name)) used.insert(m->layer);
  for (const auto& name : list_names(p.layers()))
    if (name.rfind(".tmp-", 0) != 0 && !used.count(name))
      (void)detail::remove_tree(p.layers() + "/" + name);
}

Result<std::string> mmdebstrap_version() {
  auto r = detail::run_process({"mmdebstrap", "--version"}, {}, nullptr);
  if (!r)
    return error(TemplateError::kBuildFailed, "mmdebstrap is not installed: " + r.error().message);
  if (r->exit_code != 0)
    return error(TemplateError::kBuildFailed, "`mmdebstrap --version` failed: " + r->tail);
  std::string v = r->tail;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

// The host's apt sources for the suite, read at run time (nothing about mirrors is built in).
std::vector<std::string> host_mirrors() {
  std::vector<std::pair<std::string, std::string>> files;
  if (auto t = read_file("/etc/apt/sources.list")) files.emplace_back("sources.list", *t);
  for (const auto& name : list_names("/etc/apt/sources.list.d")) {
    bool list = name.size() > 5 && name.substr(name.size() - 5) == ".list";
    bool sources = name.size() > 8 && name.substr(name.size() - 8) == ".sources";
    if (!list && !sources) continue;
    if (auto t = read_file("/etc/apt/sources.list.d/" + name)) files.emplace_back(name, *t);
  }
  return detail::mirror_lines(files, detail::kSuite);
}

Status check_input_file(const std::string& path, const std::string& what, bool executable) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return error(TemplateError::kMissingInput, what + " " + path + " does not exist");
  if (executable && ::access(path.c_str(), X_OK) != 0)
    return error(TemplateError::kMissingInput, what + " " + path + " is not executable");
  return {};
}

class Builder {
 public:
  Builder(const Paths& p, const TemplateSpec& spec, const Progress& progress,
          const std::atomic<bool>* cancel)
      : p_(p), spec_(spec), progress_(progress), cancel_(cancel) {}

  Result<TemplateInfo> run();

 private:
  void say(const std::string& line) const {
    if (progress_) progress_(line);
  }
  bool cancelled() const { return cancel_ && cancel_->load(); }
  Failure cancelled_error() const {
    return error(TemplateError::kCancelled, "build of template '" + spec_.name + "' cancelled");
  }
  Result<detail::InputDigests> digests(const std::string& mmdebstrap);
  Status run_mmdebstrap(const std::vector<std::string>& argv);
  Status build_layer(const std::string& layer_id, const std::vector<std::string>& packages);
  Status stage(const std::string& stage_dir);
  Status run_step(const std::string& what, const std::vector<std::string>& argv,
                  const std::function<void(std::string_view)>& on_line = {});
  Result<uint64_t> make_image(const std::string& rootfs, const std::string& image,
                              uint64_t* rootfs_bytes);

  const Paths& p_;
  const TemplateSpec& spec_;
  const Progress& progress_;
  const std::atomic<bool>* cancel_;
};

Result<detail::InputDigests> Builder::digests(const std::string& mmdebstrap) {
  detail::InputDigests d;
  d.mmdebstrap_version = mmdebstrap;
  auto agent = detail::hash_file(spec_.agent_binary);
  if (!agent) return error(TemplateError::kMissingInput, agent.error().message);
  d.agent = *agent;
  auto ca = detail::hash_file(spec_.ca_cert_pem_path);
  if (!ca) return error(TemplateError::kMissingInput, ca.error().message);
  d.ca = *ca;
  for (const auto& f : spec_.files) {
    auto h = detail::hash_tree(f.source);
    if (!h)
      return error(TemplateError::kInvalidSpec, "--file " + f.source + ": " + h.error().message);
    d.files.push_back(*h);
  }
  return d;
}

Status Builder::run_step(const std::string& what, const std::vector<std::string>& argv,
                         const std::function<void(std::string_view)>& on_line) {
  auto r = detail::run_process(argv, on_line, cancel_);
  if (!r) return error(TemplateError::kBuildFailed, what + ": " + r.error().message);
  if (r->cancelled) return cancelled_error();
  if (r->exit_code != 0)
    return error(
        TemplateError::kBuildFailed,
        what + " failed (exit " + std::to_string(r->exit_code) + "):\n" + last_lines(r->tail, 20));
  return {};
}

Status Builder::run_mmdebstrap(const std::vector<std::string>& argv) {
  std::vector<std::string> missing;
  bool unreachable = false;
  auto on_line = [&](std::string_view line) {
    for (const auto& name : detail::missing_packages(line))
      if (missing.size() < detail::kMaxReportedPackages &&
          std::find(missing.begin(), missing.end(), name) == missing.end())
        missing.push_back(name);
    if (detail::mirror_unreachable(line)) unreachable = true;
    if (line.rfind("I: ", 0) == 0 || line.rfind("E: ", 0) == 0 || line.rfind("W: ", 0) == 0)
      say("mmdebstrap: " + std::string(line.substr(3)));
  };
  Status st = run_step("mmdebstrap", detail::isolated(argv), on_line);
  if (st || st.error().code == int(TemplateError::kCancelled)) return st;
  if (!missing.empty()) {
    std::string names;
    for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
    return error(TemplateError::kMissingPackage,
                 "the apt sources have no package " + names + " (template '" + spec_.name + "')");
  }
  if (unreachable)
    return error(TemplateError::kMirrorUnreachable,
                 "mmdebstrap could not reach the apt sources: " + st.error().message);
  return st;
}

Status Builder::build_layer(const std::string& layer_id, const std::vector<std::string>& packages) {
  if (auto st = ensure_directory(p_.layers(), 0755); !st) return st;
  TmpDir tmp(p_.layers() + "/.tmp-" + detail::random_suffix());
  if (::mkdir(tmp.path().c_str(), 0755) != 0)
    return fail("creating " + tmp.path() + ": " + std::strerror(errno));
  std::string include;
  for (const auto& pkg : packages) include += (include.empty() ? "" : ",") + pkg;
  auto mirrors = host_mirrors();
  if (mirrors.empty())
    say("no " + std::string(detail::kSuite) +
        " entry in the host's apt sources: using mmdebstrap's default mirror");
  for (const auto& m : mirrors) say("apt source: " + m);
  auto argv_for = [&](bool simulate) {
    // TMPDIR: mmdebstrap's own scratch directory lands in ours, removed with it.
    std::vector<std::string> argv = {"env",         "TMPDIR=" + tmp.path(),
                                     "mmdebstrap",  "--variant=apt",
                                     "--mode=root", "--include=" + include};
    if (simulate) {
      argv.insert(argv.end(), {"--simulate", std::string(detail::kSuite), "/dev/null"});
    } else {
      argv.insert(
          argv.end(),
          {"--format=directory",
           // Documentation and translations are read by nothing in a sandbox; they
           // stay excluded for packages installed later too (/etc/dpkg/dpkg.cfg.d).
           "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/info/*",
           "--dpkgopt=path-exclude=/usr/share/locale/*",
           "--dpkgopt=path-include=/usr/share/locale/locale.alias",
           "--dpkgopt=path-exclude=/usr/share/doc/*",
           "--dpkgopt=path-include=/usr/share/doc/*/copyright", std::string(detail::kSuite),
           tmp.path() + "/rootfs"});
    }
    argv.insert(argv.end(), mirrors.begin(), mirrors.end());
    return argv;
  };
  auto start = Clock::now();
  // Packages beyond the base set may be misspelt: a dry run names a missing one in seconds,
  // where the real run would find out only after installing the essential set.
  auto base = TemplateStore::base_packages();
  bool extra = std::any_of(spec_.packages.begin(), spec_.packages.end(), [&](const auto& p) {
    return std::find(base.begin(), base.end(), p) == base.end();
  });
  if (extra) {
    say("checking the package names with a dry run");
    if (auto st = run_mmdebstrap(argv_for(true)); !st) return st;
  }
  say("building the packages layer " + layer_id + " (" + include + ")");
  if (auto st = run_mmdebstrap(argv_for(false)); !st) return st;
  if (::rename(tmp.path().c_str(), (p_.layers() + "/" + layer_id).c_str()) != 0)
    return fail("renaming " + tmp.path() + ": " + std::strerror(errno));
  tmp.release();
  say("packages layer built in " + fixed1(seconds_since(start)) + " s");
  return {};
}

// Creates the parents of stage + dest, each 0755 whatever the umask (they become directories of
// the rootfs unless those exist there already).
Status make_parents(const std::string& stage, std::string_view dest) {
  std::string path = stage;
  size_t pos = 1;
  for (size_t slash; (slash = dest.find('/', pos)) != std::string_view::npos; pos = slash + 1) {
    path = stage + std::string(dest.substr(0, slash));
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      return fail("creating " + path + ": " + std::strerror(errno));
    if (::chmod(path.c_str(), 0755) != 0)
      return fail("chmod " + path + ": " + std::strerror(errno));
  }
  return {};
}

Status write_into(const std::string& stage, std::string_view dest, std::string_view data,
                  mode_t mode) {
  if (auto st = make_parents(stage, dest); !st) return st;
  return write_file_atomic(stage + std::string(dest), data, mode);
}

Status Builder::stage(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 || ::chmod(dir.c_str(), 0755) != 0)
    return fail("creating " + dir + ": " + std::strerror(errno));
  // The staging tree is copied over / in the rootfs; every directory it creates is 0755.
  auto agent = read_file(spec_.agent_binary);
  if (!agent) return fail(agent.error());
  if (auto st = write_into(dir, detail::kAgentPath, *agent, 0755); !st) return st;
  auto ca = read_file(spec_.ca_cert_pem_path);
  if (!ca) return fail(ca.error());
  if (auto st = write_into(dir, detail::kCaPath, *ca, 0644); !st) return st;
  std::string conf = std::string(detail::kConfigDir);
  if (auto st = write_into(dir, conf + "/template.env", detail::render_env_file(spec_.env), 0644);
      !st)
    return st;
  if (!spec_.start_cmd.empty())
    if (auto st = write_into(dir, conf + "/start_cmd", spec_.start_cmd + "\n", 0644); !st)
      return st;
  if (!spec_.ready_cmd.empty())
    if (auto st = write_into(dir, conf + "/ready_cmd", spec_.ready_cmd + "\n", 0644); !st)
      return st;
  for (const auto& f : spec_.files) {
    std::string target = dir + f.destination;
    if (auto st = make_parents(dir, f.destination); !st) return st;
    if (auto st = run_step("copying " + f.source,
                           {"cp", "-a", "--no-target-directory", "--", f.source, target});
        !st)
      return st;
  }
  return {};
}

Result<uint64_t> Builder::make_image(const std::string& rootfs, const std::string& image,
                                     uint64_t* rootfs_bytes) {
  auto usage = detail::disk_usage(rootfs);
  if (!usage) return fail(usage.error());
  *rootfs_bytes = usage->bytes;
  // Room for 64 Ki new files and 256 MiB of new data in the sandbox, on top of the content
  // plus 10 % for ext4's own metadata.
  constexpr uint64_t kHeadroomBytes = 256ull << 20;
  constexpr uint64_t kExtraInodes = 64 * 1024;
  uint64_t inodes = usage->inodes + kExtraInodes;
  uint64_t bytes = usage->bytes + usage->bytes / 10 + inodes * 256 + kHeadroomBytes;
  bytes = (bytes + (4ull << 20) - 1) / (4ull << 20) * (4ull << 20);
  say("ext4 image: " + std::to_string(bytes >> 20) + " MiB for " +
      std::to_string(usage->bytes >> 20) + " MiB in " + std::to_string(usage->inodes) + " files");
  // The journal stays: a microVM's disk can be paused, snapshotted or cut off mid-write.
  if (auto st = run_step("mkfs.ext4",
                         {"mkfs.ext4", "-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-N",
                          std::to_string(inodes), "-L", "cordon-root", "-E", "root_owner=0:0", "-d",
                          rootfs, image, std::to_string(bytes >> 10) + "k"});
      !st)
    return fail(st.error());
  return bytes;
}

Result<TemplateInfo> Builder::run() {
  auto start = Clock::now();
  auto version = mmdebstrap_version();
  if (!version) return fail(version.error());
  auto d = digests(*version);
  if (!d) return fail(d.error());
  std::string hash = detail::content_hash(spec_, *d);
  std::string id = detail::id_from_hash(hash);
  auto packages = detail::all_packages(spec_);

  if (auto cached = load_manifest(p_, id)) {
    if (detail::read_alias(p_.aliases(), spec_.name) != id)
      if (auto st = detail::set_alias(p_.aliases(), spec_.name, id); !st) return fail(st.error());
    say("template '" + spec_.name + "' is up to date: " + id);
    cached->info.current = true;
    return cached->info;
  }

  std::string layer_id = detail::id_from_hash(detail::layer_hash(packages, *version));
  if (!fs::exists(p_.layers() + "/" + layer_id + "/rootfs")) {
    if (auto st = build_layer(layer_id, packages); !st) return fail(st.error());
  } else {
    say("reusing the packages layer " + layer_id);
  }
  if (cancelled()) return cancelled_error();

  TmpDir tmp(p_.root + "/.tmp-" + detail::random_suffix());
  if (::mkdir(tmp.path().c_str(), 0755) != 0)
    return fail("creating " + tmp.path() + ": " + std::strerror(errno));
  say("copying the layer");
  if (auto st = run_step("copying the layer",
                         {"cp", "-a", "--reflink=auto", p_.layers() + "/" + layer_id + "/rootfs",
                          tmp.path() + "/rootfs"});
      !st)
    return fail(st.error());
  if (auto st = stage(tmp.path() + "/stage"); !st) return fail(st.error());
  std::string script = tmp.path() + "/customize.sh";
  if (auto st = write_file_atomic(script, detail::render_customize_script(spec_), 0755); !st)
    return fail(st.error());
  std::string version_out = tmp.path() + "/agent-version";
  if (auto st = run_step("the customize script",
                         detail::isolated({"sh", script, tmp.path() + "/rootfs",
                                           tmp.path() + "/stage", version_out}),
                         [this](std::string_view line) { say(std::string(line)); });
      !st)
    return fail(st.error());
  auto version_text = read_file(version_out);
  std::string envd = detail::parse_agent_version(version_text ? *version_text : "");
  if (envd.empty()) {
    envd = std::string(detail::kDefaultEnvdVersion);
    say("the agent's --version names no version; recording envd " + envd);
  }
  if (cancelled()) return cancelled_error();

  detail::Manifest m;
  TemplateInfo& info = m.info;
  auto image_bytes =
      make_image(tmp.path() + "/rootfs", tmp.path() + "/rootfs.ext4", &info.rootfs_bytes);
  if (!image_bytes) return fail(image_bytes.error());
  if (cancelled()) return cancelled_error();
  // Only the results move into place.
  for (const char* scratch : {"/stage", "/customize.sh", "/agent-version"})
    if (auto st = detail::remove_tree(tmp.path() + scratch); !st) return fail(st.error());

  info.id = id;
  info.alias = spec_.name;
  info.envd_version = envd;
  info.built_at = std::chrono::system_clock::now();
  info.packages = packages;
  info.env = spec_.env;
  info.start_cmd = spec_.start_cmd;
  info.ready_cmd = spec_.ready_cmd;
  info.content_hash = hash;
  info.image_bytes = *image_bytes;
  m.layer = layer_id;
  m.build_seconds = seconds_since(start);
  if (auto st = write_file_atomic(tmp.path() + "/lock", "", 0644); !st) return fail(st.error());
  if (auto st = write_file_atomic(tmp.path() + "/manifest.json", detail::manifest_to_json(m), 0644);
      !st)
    return fail(st.error());

  std::string final_dir = p_.dir(id);
  // A directory without a manifest is the remains of an earlier failure (never a template).
  if (auto st = detail::remove_tree(final_dir); !st) return fail(st.error());
  if (::rename(tmp.path().c_str(), final_dir.c_str()) != 0)
    return fail("renaming " + tmp.path() + " to " + final_dir + ": " + std::strerror(errno));
  tmp.release();
  if (auto st = detail::set_alias(p_.aliases(), spec_.name, id); !st) return fail(st.error());
  collect_layers(p_);
  say("template '" + spec_.name + "' built in " + fixed1(m.build_seconds) + " s: " + id);
  auto loaded = load_manifest(p_, id);
  if (!loaded) return fail(loaded.error());
  return loaded->info;
}

}  // namespace

TemplateStore::TemplateStore(StateDir state) : state_(std::move(state)) {}

std::vector<std::string> TemplateStore::base_packages() {
  return {"bash", "ca-certificates", "coreutils", "curl", "git", "procps", "python3"};
}

Result<TemplateInfo> TemplateStore::build(const TemplateSpec& spec, const Progress& progress,
                                          const std::atomic<bool>* cancel) {
  if (auto st = detail::validate_spec(spec); !st) return fail(st.error());
  if (auto st = check_input_file(spec.agent_binary, "agent binary", true); !st)
    return fail(st.error());
  if (auto st = check_input_file(spec.ca_cert_pem_path, "root CA certificate", false); !st)
    return error(TemplateError::kMissingInput, st.error().message + " (run `cordon init`)");
  for (const auto& f : spec.files)
    if (std::error_code ec; !fs::exists(fs::symlink_status(f.source, ec)))
      return error(TemplateError::kInvalidSpec, "--file source " + f.source + " does not exist");
  Paths p = paths_of(state_);
  for (const auto& dir : {p.root, p.aliases()})
    if (auto st = ensure_directory(dir, 0755); !st) return fail(st.error());
  auto lock = FileLock::acquire(p.lock(), FileLock::Mode::kExclusive, cancel, [&]() {
    if (progress) progress("waiting for another template build in " + p.root);
  });
  if (!lock) return fail(lock.error());
  for (const auto& dir : {p.root, p.layers()})
    if (auto st = remove_stale(dir, progress); !st) return fail(st.error());
  Builder builder(p, spec, progress, cancel);
  return builder.run();
}

Result<TemplateInfo> TemplateStore::find(const std::string& name_or_id) const {
  Paths p = paths_of(state_);
  if (detail::valid_template_name(name_or_id))
    if (auto id = detail::read_alias(p.aliases(), name_or_id))
      if (auto m = load_manifest(p, *id)) return m->info;
  if (detail::valid_template_id(name_or_id))
    if (auto m = load_manifest(p, name_or_id)) return m->info;
  return error(TemplateError::kNotFound, "no template named '" + name_or_id + "' in " + p.root);
}

Result<std::vector<TemplateInfo>> TemplateStore::list() const {
  Paths p = paths_of(state_);
  std::vector<TemplateInfo> out;
  for (const auto& name : list_names(p.root)) {
    if (!detail::valid_template_id(name)) continue;
    auto m = load_manifest(p, name);
    if (!m) {
      if (m.error().code == int(TemplateError::kNotFound)) continue;  // being removed
      return fail(m.error());
    }
    out.push_back(std::move(m->info));
  }
  std::sort(out.begin(), out.end(),
            [](const TemplateInfo& a, const TemplateInfo& b) { return a.built_at > b.built_at; });
  return out;
}

Status TemplateStore::remove(const std::string& name_or_id) {
  Paths p = paths_of(state_);
  auto lock = FileLock::acquire(p.lock(), FileLock::Mode::kExclusive, nullptr);
  if (!lock) return fail(lock.error());
  std::vector<std::string> ids;
  bool by_alias = detail::valid_template_name(name_or_id) &&
                  detail::read_alias(p.aliases(), name_or_id).has_value();
  // The build the name stands for, in use by a sandbox, is refused whole: its alias stays and
  // nothing is removed (superseded builds of an alias that are in use are kept, below).
  std::string named = by_alias ? *detail::read_alias(p.aliases(), name_or_id) : name_or_id;
  if (detail::valid_template_id(named) && ::access((p.dir(named) + "/lock").c_str(), F_OK) == 0) {
    auto held = FileLock::try_acquire(p.dir(named) + "/lock", FileLock::Mode::kExclusive);
    if (!held) return fail(held.error());
    if (!held->has_value())
      return error(TemplateError::kInUse,
                   "template '" + name_or_id + "' (build " + named +
                       ") is in use by a sandbox: not removed; kill the sandboxes made from it "
                       "first (cordon sandbox list)");
  }
  for (const auto& name : list_names(p.root)) {
    if (!detail::valid_template_id(name)) continue;
    auto m = load_manifest(p, name);
    if (!m) continue;
    if (by_alias ? m->info.alias == name_or_id : name == name_or_id) {
      ids.push_back(name);
      // The alias goes with the build it points at.
      if (!by_alias && m->info.current) ::unlink((p.aliases() + "/" + m->info.alias).c_str());
    }
  }
  if (by_alias) ::unlink((p.aliases() + "/" + name_or_id).c_str());
  if (ids.empty() && !by_alias)
    return error(TemplateError::kNotFound, "no template named '" + name_or_id + "' in " + p.root);
  std::vector<std::string> kept;
  for (const auto& id : ids) {
    auto held = FileLock::try_acquire(p.dir(id) + "/lock", FileLock::Mode::kExclusive);
    if (!held) return fail(held.error());
    if (!held->has_value()) {
      kept.push_back(id);
      continue;
    }
    // Renamed first, so that find() and list() never see a half-removed template.
    std::string doomed = p.root + "/.tmp-rm-" + detail::random_suffix();
    if (::rename(p.dir(id).c_str(), doomed.c_str()) != 0)
      return fail("removing " + p.dir(id) + ": " + std::strerror(errno));
    if (auto st = detail::remove_tree(doomed); !st) return st;
  }
  collect_layers(p);
  if (!kept.empty()) {
    std::string list;
    for (const auto& id : kept) list += (list.empty() ? "" : ", ") + id;
    return error(TemplateError::kInUse,
                 "kept template " + list + ": a sandbox is using it (remove it by id later)");
  }
  return {};
}

}  // namespace cordon::sandbox
