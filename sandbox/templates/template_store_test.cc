// Unit tests of the template store's pure parts (spec validation, hashing, mmdebstrap output,
// apt sources, manifest) and of its file-system parts on a temporary state directory (alias
// swap, removal, locks, find/list/remove on hand-made templates). The real mmdebstrap build is
// tests/e2e/templates/.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/file_io.h"
#include "common/testing/temp_dir.h"
#include "sandbox/templates/detail/fs.h"
#include "sandbox/templates/detail/process.h"
#include "sandbox/templates/detail/recipe.h"
#include "sandbox/templates/template_store.h"

namespace cordon::sandbox {
namespace {
namespace fs = std::filesystem;
using namespace detail;

TemplateSpec good_spec() {
  TemplateSpec s;
  s.name = "base";
  s.packages = {"jq", "nodejs"};
  s.files = {{"/etc/hostname", "/home/user/data.txt"}};
  s.env = {{"FOO", "bar"}};
  s.start_cmd = "python3 -m http.server 8000";
  s.ready_cmd = "curl -sf localhost:8000";
  s.agent_binary = "/usr/local/bin/cordon-agent";
  s.ca_cert_pem_path = "/var/lib/cordon/ca/root.pem";
  return s;
}

InputDigests digests() {
  return {"aa", "bb", {"cc"}, "mmdebstrap 1.3.5"};
}

void write(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << data;
}

TEST(TemplateNames, Validity) {
  EXPECT_TRUE(valid_template_name("base"));
  EXPECT_TRUE(valid_template_name("py3.11_dev-2"));
  EXPECT_FALSE(valid_template_name(""));
  EXPECT_FALSE(valid_template_name("Base"));
  EXPECT_FALSE(valid_template_name("-base"));
  EXPECT_FALSE(valid_template_name("../x"));
  EXPECT_FALSE(valid_template_name(std::string(65, 'a')));
  EXPECT_TRUE(valid_package_name("python3"));
  EXPECT_TRUE(valid_package_name("libstdc++6"));
  EXPECT_TRUE(valid_package_name("g++-12"));
  EXPECT_TRUE(valid_package_name("libc6:amd64"));
  EXPECT_FALSE(valid_package_name("a"));
  EXPECT_FALSE(valid_package_name("Python3"));
  EXPECT_FALSE(valid_package_name("-o=Dpkg::foo"));
  EXPECT_FALSE(valid_package_name("curl,wget"));
  EXPECT_FALSE(valid_package_name("curl wget"));
  EXPECT_FALSE(valid_package_name("libc6:"));
  EXPECT_TRUE(valid_env_name("_A1"));
  EXPECT_FALSE(valid_env_name("1A"));
  EXPECT_FALSE(valid_env_name("A-B"));
  EXPECT_TRUE(valid_template_id("abcdefghij0123456789"));
  EXPECT_FALSE(valid_template_id("abcdefghij012345678"));
  EXPECT_FALSE(valid_template_id("ABCDEFGHIJ0123456789"));
}

TEST(TemplateSpecValidation, AcceptsAGoodSpec) {
  EXPECT_TRUE(validate_spec(good_spec()));
}

void expect_invalid(const TemplateSpec& s, const std::string& names) {
  auto st = validate_spec(s);
  ASSERT_FALSE(st) << "accepted a spec that names " << names;
  EXPECT_EQ(st.error().code, int(TemplateError::kInvalidSpec));
  EXPECT_NE(st.error().message.find(names), std::string::npos) << st.error().message;
}

TEST(TemplateSpecValidation, RejectsBadInputsNamingThem) {
  auto s = good_spec();
  s.name = "Bad Name";
  expect_invalid(s, "Bad Name");
  s = good_spec();
  s.packages.push_back("--allow-unauthenticated");
  expect_invalid(s, "--allow-unauthenticated");
  s = good_spec();
  s.files.push_back({"/etc/passwd", "relative/path"});
  expect_invalid(s, "relative/path");
  s = good_spec();
  s.files.push_back({"/etc/passwd", "/home/user/../../etc/shadow"});
  expect_invalid(s, "/home/user/../../etc/shadow");
  s = good_spec();
  s.files.push_back({"/etc/passwd", "/etc/cordon/template.env"});
  expect_invalid(s, "/etc/cordon/template.env");
  s = good_spec();
  s.files.push_back({"/etc/passwd", "/usr/local/bin/cordon-agent"});
  expect_invalid(s, "cordon-agent");
  s = good_spec();
  s.files.push_back({"/etc/passwd", "/proc/x"});
  expect_invalid(s, "/proc/x");
  s = good_spec();
  s.files.push_back({"/etc/os-release", "/home/user/data.txt"});
  expect_invalid(s, "given twice");
  s = good_spec();
  s.env["BAD-NAME"] = "x";
  expect_invalid(s, "BAD-NAME");
  s = good_spec();
  s.env["GOOD"] = "line1\nline2";
  expect_invalid(s, "GOOD");
  s = good_spec();
  s.start_cmd = std::string(5000, 'x');
  expect_invalid(s, "start command");
  s = good_spec();
  s.packages.assign(kMaxPackages + 1, "jq");
  expect_invalid(s, "too many packages");
}

TEST(TemplateHash, AllPackagesIsSortedBasePlusExtra) {
  auto s = good_spec();
  s.packages = {"zsh", "curl", "jq"};
  auto all = all_packages(s);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(std::count(all.begin(), all.end(), "curl"), 1);
  for (const auto& p : TemplateStore::base_packages())
    EXPECT_NE(std::find(all.begin(), all.end(), p), all.end()) << p;
  EXPECT_NE(std::find(all.begin(), all.end(), "zsh"), all.end());
}

TEST(TemplateHash, EveryInputChangesTheHash) {
  auto base = good_spec();
  std::string h = content_hash(base, digests());
  EXPECT_EQ(h, content_hash(base, digests()));
  EXPECT_EQ(h.size(), 64u);

  auto reordered = base;
  reordered.packages = {"nodejs", "jq", "nodejs"};
  EXPECT_EQ(h, content_hash(reordered, digests())) << "package order must not matter";

  std::vector<std::function<void(TemplateSpec&, InputDigests&)>> changes = {
      [](TemplateSpec& s, InputDigests&) { s.name = "other"; },
      [](TemplateSpec& s, InputDigests&) { s.packages.push_back("zsh"); },
      [](TemplateSpec& s, InputDigests&) { s.files[0].destination = "/home/user/x"; },
      [](TemplateSpec& s, InputDigests&) { s.env["FOO"] = "baz"; },
      [](TemplateSpec& s, InputDigests&) { s.env["NEW"] = ""; },
      [](TemplateSpec& s, InputDigests&) { s.start_cmd += " "; },
      [](TemplateSpec& s, InputDigests&) { s.ready_cmd.clear(); },
      [](TemplateSpec&, InputDigests& d) { d.agent = "ab"; },
      [](TemplateSpec&, InputDigests& d) { d.ca = "bc"; },
      [](TemplateSpec&, InputDigests& d) { d.files[0] = "cd"; },
      [](TemplateSpec&, InputDigests& d) { d.mmdebstrap_version = "mmdebstrap 1.4.0"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    auto s = base;
    auto d = digests();
    changes[i](s, d);
    EXPECT_NE(h, content_hash(s, d)) << "change #" << i << " did not change the hash";
  }
  // Field boundaries are length-prefixed: moving a character between fields changes the hash.
  auto a = base, b = base;
  a.start_cmd = "ab";
  a.ready_cmd = "c";
  b.start_cmd = "a";
  b.ready_cmd = "bc";
  EXPECT_NE(content_hash(a, digests()), content_hash(b, digests()));
}

TEST(TemplateHash, LayerHashDependsOnPackagesOnly) {
  auto s = good_spec();
  auto l = layer_hash(all_packages(s), "mmdebstrap 1.3.5");
  auto t = s;
  t.env["X"] = "1";
  t.name = "other";
  EXPECT_EQ(l, layer_hash(all_packages(t), "mmdebstrap 1.3.5"));
  t.packages.push_back("zsh");
  EXPECT_NE(l, layer_hash(all_packages(t), "mmdebstrap 1.3.5"));
  EXPECT_NE(l, layer_hash(all_packages(s), "mmdebstrap 1.3.6"));
}

TEST(TemplateHash, IdIsTwentyLowercaseAlnum) {
  auto id = id_from_hash(content_hash(good_spec(), digests()));
  EXPECT_TRUE(valid_template_id(id)) << id;
  auto other = good_spec();
  other.name = "other";
  EXPECT_NE(id, id_from_hash(content_hash(other, digests())));
}

// What mmdebstrap 1.3.5 printed here for --include=bash,no-such-package-xyz,another-missing.
constexpr std::string_view kMissingOutput =
    "I: installing remaining packages inside the chroot...\n"
    "Reading package lists...\n"
    "Building dependency tree...\n"
    "E: Unable to locate package no-such-package-xyz\n"
    "E: Unable to locate package another-missing\n"
    "E: setup failed: E: apt-get -o Dir::Bin::dpkg=env --yes install bash no-such-package-xyz "
    "another-missing failed\n"
    "E: mmdebstrap failed to run\n";

TEST(MmdebstrapOutput, NamesEveryMissingPackageOnce) {
  auto names = missing_packages(kMissingOutput);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "no-such-package-xyz");
  EXPECT_EQ(names[1], "another-missing");
  std::string repeated;
  for (int i = 0; i < 3; ++i) repeated += kMissingOutput;
  EXPECT_EQ(missing_packages(repeated).size(), 2u);
  EXPECT_TRUE(missing_packages("I: success in 67.1 seconds\n").empty());
  std::string many;
  for (int i = 0; i < 100; ++i) many += "E: Unable to locate package p" + std::to_string(i) + "\n";
  EXPECT_EQ(missing_packages(many).size(), kMaxReportedPackages);
}

TEST(MmdebstrapOutput, RecognizesAnUnreachableMirror) {
  EXPECT_TRUE(mirror_unreachable(
      "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  "
      "Temporary failure resolving 'deb.debian.org'"));
  EXPECT_TRUE(mirror_unreachable("E: Could not connect to deb.debian.org:80"));
  EXPECT_FALSE(mirror_unreachable(kMissingOutput));
}

TEST(AgentVersion, ParsesWhatTheAgentPrints) {
  EXPECT_EQ(parse_agent_version("cordon-agent 0.1.0 (envd 0.6.13)\n"), "0.6.13");
  EXPECT_EQ(parse_agent_version("envd/v0.2.0"), "0.2.0");
  EXPECT_EQ(parse_agent_version("0.6.13\n"), "0.6.13");
  EXPECT_EQ(parse_agent_version("cordon-agent version 1.2.3\n"), "1.2.3");
  EXPECT_EQ(parse_agent_version("usage: busybox\n"), "");
}

TEST(AptSources, ReadsOneLineAndDeb822Entries) {
  std::vector<std::pair<std::string, std::string>> files = {
      {"debian.sources",
       "Types: deb\n"
       "# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
       "URIs: http://mirror.example/debian\n"
       "Suites: bookworm bookworm-updates\n"
       "Components: main\n"
       "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
       "\n"
       "Types: deb\n"
       "URIs: http://mirror.example/debian-security\n"
       "Suites: bookworm-security\n"
       "Components: main\n"
       "\n"
       "Types: deb-src\n"
       "URIs: http://mirror.example/debian\n"
       "Suites: bookworm\n"
       "Components: main\n"
       "\n"
       "Enabled: no\n"
       "Types: deb\n"
       "URIs: http://disabled.example/debian\n"
       "Suites: bookworm\n"
       "Components: main\n"},
      {"sources.list",
       "deb [arch=amd64 signed-by=/x.gpg] http://other.example/debian bookworm main contrib\n"
       "deb http://other.example/debian trixie main\n"
       "# deb http://commented.example/debian bookworm main\n"
       "deb http://mirror.example/debian bookworm main\n"},
      {"thirdparty.list", "deb https://apt.example nodistro main\n"},
  };
  auto lines = mirror_lines(files, "bookworm");
  std::vector<std::string> want = {
      "deb http://mirror.example/debian bookworm main",
      "deb http://mirror.example/debian bookworm-updates main",
      "deb http://mirror.example/debian-security bookworm-security main",
      "deb http://other.example/debian bookworm main contrib",
  };
  EXPECT_EQ(lines, want);
  EXPECT_TRUE(mirror_lines({}, "bookworm").empty());
}

TEST(TemplateFiles, EnvFileHasTheCaVariablesAndTheSpecEnv) {
  auto text = render_env_file({{"FOO", "bar baz"}, {"CURL_CA_BUNDLE", "/own.pem"}});
  EXPECT_NE(text.find("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n"), std::string::npos);
  EXPECT_NE(text.find("REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n"),
            std::string::npos);
  EXPECT_NE(text.find("NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt\n"),
            std::string::npos);
  EXPECT_NE(text.find("CURL_CA_BUNDLE=/own.pem\n"), std::string::npos);
  EXPECT_EQ(text.find("CURL_CA_BUNDLE=/etc"), std::string::npos);
  EXPECT_NE(text.find("FOO=bar baz\n"), std::string::npos);
}

TEST(TemplateFiles, ShellQuoting) {
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  auto s = good_spec();
  s.files = {{"/x", "/home/user/it's here"}};
  auto script = render_customize_script(s);
  EXPECT_NE(script.find("chown -R 1000:1000 '/home/user/it'\\''s here'"), std::string::npos)
      << script;
  EXPECT_NE(script.find("update-ca-certificates"), std::string::npos);
  EXPECT_NE(script.find("useradd --uid 1000 --gid 1000"), std::string::npos);
}

TEST(TemplateManifest, RoundTrips) {
  Manifest m;
  m.info.id = "abcdefghij0123456789";
  m.info.alias = "base";
  m.info.envd_version = "0.6.13";
  m.info.built_at = std::chrono::system_clock::time_point(std::chrono::seconds(1'790'000'000));
  m.info.packages = {"bash", "python3"};
  m.info.env = {{"A", "1"}};
  m.info.start_cmd = "s";
  m.info.ready_cmd = "r";
  m.info.content_hash = std::string(64, 'f');
  m.info.image_bytes = 123;
  m.info.rootfs_bytes = 45;
  m.layer = "layer";
  auto back = manifest_from_json(manifest_to_json(m), "test");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->info.id, m.info.id);
  EXPECT_EQ(back->info.built_at, m.info.built_at);
  EXPECT_EQ(back->info.packages, m.info.packages);
  EXPECT_EQ(back->info.env, m.info.env);
  EXPECT_EQ(back->info.image_bytes, 123u);
  EXPECT_EQ(back->layer, "layer");
  auto bad = manifest_from_json("{\"id\": 1}", "where.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("where.json"), std::string::npos);
}

TEST(TemplateFs, AliasSwapReplacesAtomically) {
  testing::TempDir dir("tpl-alias");
  EXPECT_FALSE(read_alias(dir.path(), "base"));
  ASSERT_TRUE(set_alias(dir.path(), "base", "aaaaaaaaaaaaaaaaaaaa"));
  EXPECT_EQ(read_alias(dir.path(), "base"), "aaaaaaaaaaaaaaaaaaaa");
  ASSERT_TRUE(set_alias(dir.path(), "base", "bbbbbbbbbbbbbbbbbbbb"));
  EXPECT_EQ(read_alias(dir.path(), "base"), "bbbbbbbbbbbbbbbbbbbb");
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "base");
  }
  EXPECT_EQ(entries, 1u) << "temporary symlinks left behind";
}

TEST(TemplateFs, RemoveTreeDoesNotFollowSymlinks) {
  testing::TempDir dir("tpl-rm");
  std::string outside = dir.path() + "/outside";
  write(outside + "/keep.txt", "keep");
  std::string tree = dir.path() + "/tree";
  write(tree + "/a/b/c.txt", "x");
  fs::create_directory_symlink(outside, tree + "/a/link");
  fs::create_symlink(outside + "/keep.txt", tree + "/file-link");
  ASSERT_TRUE(remove_tree(tree));
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(outside + "/keep.txt"));
  EXPECT_TRUE(remove_tree(tree)) << "a missing tree is not an error";
}

TEST(TemplateFs, HashTreeCoversContentModeAndNames) {
  testing::TempDir dir("tpl-hash");
  write(dir.path() + "/t/a.txt", "one");
  write(dir.path() + "/t/sub/b.txt", "two");
  auto h1 = hash_tree(dir.path() + "/t");
  ASSERT_TRUE(h1) << h1.error().message;
  EXPECT_EQ(*h1, *hash_tree(dir.path() + "/t"));
  write(dir.path() + "/t/sub/b.txt", "TWO");
  auto h2 = hash_tree(dir.path() + "/t");
  EXPECT_NE(*h1, *h2);
  ::chmod((dir.path() + "/t/a.txt").c_str(), 0700);
  auto h3 = hash_tree(dir.path() + "/t");
  EXPECT_NE(*h2, *h3);
  fs::rename(dir.path() + "/t/a.txt", dir.path() + "/t/c.txt");
  EXPECT_NE(*h3, *hash_tree(dir.path() + "/t"));
  EXPECT_FALSE(hash_tree(dir.path() + "/missing"));
  EXPECT_EQ(*hash_file(dir.path() + "/t/sub/b.txt"),
            "a1a8a8cbbed4eb53ae62ee4fb0787504087232c29aa4d817757d06b68d0501ca");  // sha256("TWO")
}

TEST(TemplateFs, FileLockExcludes) {
  testing::TempDir dir("tpl-lock");
  std::string path = dir.path() + "/lock";
  {
    auto shared = FileLock::try_acquire(path, FileLock::Mode::kShared);
    ASSERT_TRUE(shared && shared->has_value());
    auto second_shared = FileLock::try_acquire(path, FileLock::Mode::kShared);
    ASSERT_TRUE(second_shared && second_shared->has_value());
    auto excl = FileLock::try_acquire(path, FileLock::Mode::kExclusive);
    ASSERT_TRUE(excl);
    EXPECT_FALSE(excl->has_value()) << "exclusive lock granted while shared locks are held";
    std::atomic<bool> cancel{true};
    auto waited = FileLock::acquire(path, FileLock::Mode::kExclusive, &cancel);
    ASSERT_FALSE(waited);
    EXPECT_EQ(waited.error().code, int(TemplateError::kCancelled));
  }
  auto excl = FileLock::try_acquire(path, FileLock::Mode::kExclusive);
  ASSERT_TRUE(excl);
  EXPECT_TRUE(excl->has_value());
}

TEST(TemplateProcess, CapturesLinesAndExitCode) {
  std::vector<std::string> lines;
  auto r = run_process(
      {"sh", "-c", "echo one; echo two >&2; printf three; exit 3"},
      [&](std::string_view l) { lines.emplace_back(l); }, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_FALSE(run_process({"no-such-program-xyz"}, {}, nullptr));
}

TEST(TemplateProcess, CancelKillsTheWholeGroupPromptly) {
  std::atomic<bool> cancel{false};
  testing::TempDir dir("tpl-proc");
  std::string marker = dir.path() + "/late";
  auto start = std::chrono::steady_clock::now();
  std::thread setter([&]() {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  // The grandchild would write the marker after 2 s if it survived the cancel.
  auto r = run_process({"sh", "-c", "(sleep 2; touch " + marker + ") & sleep 30"}, {}, &cancel);
  setter.join();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_FALSE(fs::exists(marker)) << "a grandchild survived the cancel";
}

// A hand-made template (what build() leaves), for find/list/remove without mmdebstrap.
void fake_template(const std::string& state, const std::string& id, const std::string& alias,
                   int age_s) {
  Manifest m;
  m.info.id = id;
  m.info.alias = alias;
  m.info.envd_version = "0.6.13";
  m.info.built_at = std::chrono::system_clock::now() - std::chrono::seconds(age_s);
  m.info.content_hash = std::string(64, 'a');
  m.layer = "layer1";
  std::string dir = state + "/templates/" + id;
  write(dir + "/manifest.json", manifest_to_json(m));
  write(dir + "/lock", "");
  write(dir + "/rootfs/etc/os-release", "x");
}

TEST(TemplateStoreFs, FindListRemove) {
  testing::TempDir dir("tpl-store");
  StateDir state{dir.path()};
  const std::string old_id = "aaaaaaaaaaaaaaaaaaaa", new_id = "bbbbbbbbbbbbbbbbbbbb",
                    other_id = "cccccccccccccccccccc";
  fake_template(dir.path(), old_id, "base", 100);
  fake_template(dir.path(), new_id, "base", 10);
  fake_template(dir.path(), other_id, "py", 50);
  fs::create_directories(dir.path() + "/templates/aliases");
  ASSERT_TRUE(set_alias(dir.path() + "/templates/aliases", "base", new_id));
  ASSERT_TRUE(set_alias(dir.path() + "/templates/aliases", "py", other_id));
  fs::create_directories(dir.path() + "/templates/layers/layer1/rootfs");
  TemplateStore store(state);

  auto found = store.find("base");
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->id, new_id);
  EXPECT_TRUE(found->current);
  EXPECT_EQ(found->rootfs_dir, dir.path() + "/templates/" + new_id + "/rootfs");
  EXPECT_EQ(found->ext4_image, dir.path() + "/templates/" + new_id + "/rootfs.ext4");
  auto by_id = store.find(old_id);
  ASSERT_TRUE(by_id);
  EXPECT_FALSE(by_id->current);
  auto missing = store.find("nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, int(TemplateError::kNotFound));

  auto all = store.list();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, new_id) << "newest first";
  EXPECT_EQ((*all)[2].id, old_id);

  // A template in use (a shared lock on its lock file) is kept.
  auto lease =
      FileLock::try_acquire(dir.path() + "/templates/" + old_id + "/lock", FileLock::Mode::kShared);
  ASSERT_TRUE(lease && lease->has_value());
  auto st = store.remove("base");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, int(TemplateError::kInUse));
  EXPECT_NE(st.error().message.find(old_id), std::string::npos);
  EXPECT_FALSE(store.find("base")) << "the alias goes even when a build is kept";
  EXPECT_FALSE(fs::exists(dir.path() + "/templates/" + new_id));
  EXPECT_TRUE(store.find(old_id));
  lease->reset();
  EXPECT_TRUE(store.remove(old_id));
  EXPECT_FALSE(fs::exists(dir.path() + "/templates/" + old_id));

  // Removing by id takes the alias that points at it; the layer still in use stays.
  EXPECT_TRUE(fs::exists(dir.path() + "/templates/layers/layer1"));
  EXPECT_TRUE(store.remove(other_id));
  EXPECT_FALSE(store.find("py"));
  EXPECT_FALSE(fs::exists(dir.path() + "/templates/aliases/py"));
  EXPECT_FALSE(fs::exists(dir.path() + "/templates/layers/layer1")) << "unused layer kept";
  auto none = store.list();
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(store.remove("base").error().code, int(TemplateError::kNotFound));
}

// The build an alias (or id) stands for, in use by a sandbox (the manager's shared lock), is
// refused whole: the alias and every build stay until the lock goes.
TEST(TemplateStoreFs, RemoveRefusesTheCurrentBuildInUse) {
  testing::TempDir dir("tpl-inuse");
  StateDir state{dir.path()};
  const std::string old_id = "aaaaaaaaaaaaaaaaaaaa", new_id = "bbbbbbbbbbbbbbbbbbbb";
  fake_template(dir.path(), old_id, "base", 100);
  fake_template(dir.path(), new_id, "base", 10);
  fs::create_directories(dir.path() + "/templates/aliases");
  ASSERT_TRUE(set_alias(dir.path() + "/templates/aliases", "base", new_id));
  TemplateStore store(state);
  auto found = store.find("base");
  ASSERT_TRUE(found) << found.error().message;
  auto lease = FileLock::try_acquire(found->lock_file, FileLock::Mode::kShared);
  ASSERT_TRUE(lease && lease->has_value());
  for (const std::string& name : {std::string("base"), new_id}) {
    auto st = store.remove(name);
    ASSERT_FALSE(st) << name;
    EXPECT_EQ(st.error().code, int(TemplateError::kInUse));
    EXPECT_NE(st.error().message.find("in use by a sandbox"), std::string::npos)
        << st.error().message;
    EXPECT_NE(st.error().message.find(new_id), std::string::npos) << st.error().message;
    auto still = store.find("base");
    ASSERT_TRUE(still) << name << ": the alias went";
    EXPECT_EQ(still->id, new_id);
    EXPECT_TRUE(store.find(old_id)) << name << ": a build went";
  }
  lease->reset();
  EXPECT_TRUE(store.remove("base"));
  EXPECT_FALSE(store.find("base"));
  EXPECT_FALSE(store.find(old_id));
}

TEST(TemplateStoreBuild, RefusesMissingInputsBeforeBuilding) {
  testing::TempDir dir("tpl-build");
  TemplateStore store(StateDir{dir.path()});
  auto spec = good_spec();
  spec.files.clear();
  spec.agent_binary = "/bin/sh";
  spec.ca_cert_pem_path = dir.path() + "/ca/root.pem";
  auto r = store.build(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(TemplateError::kMissingInput));
  EXPECT_NE(r.error().message.find("cordon init"), std::string::npos) << r.error().message;

  spec.packages = {"no such package"};
  r = store.build(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(TemplateError::kInvalidSpec));
  EXPECT_NE(r.error().message.find("no such package"), std::string::npos);

  spec.packages.clear();
  write(spec.ca_cert_pem_path, "pem");
  spec.agent_binary = dir.path() + "/no-agent";
  r = store.build(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(TemplateError::kMissingInput));
  EXPECT_NE(r.error().message.find("no-agent"), std::string::npos);
}

}  // namespace
}  // namespace cordon::sandbox
