#include "audit/writer.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "audit/audit_test_util.h"
#include "audit/detail/files.h"
#include "audit/reader.h"

namespace cordon::audit {
namespace {

using test::lines_of;
using test::slurp;
using test::spit;
using test::TempDir;
namespace fs = std::filesystem;

Event request(int i, const std::string& sandbox = "sb-1") {
  Event e;
  e.event = "request";
  e.sandbox = sandbox;
  e.decision = i % 3 == 0 ? "deny" : "allow";
  e.reason = "route matched";
  e.rule = "github-api/repos";
  e.add("method", std::string("GET"))
      .add("host", std::string("api.github.com"))
      .add("path", "/repos/" + std::to_string(i))
      .add("status", int64_t(200))
      .add("tls", true);
  return e;
}

std::unique_ptr<Writer> open_writer(const std::string& dir, WriterOptions o = {}) {
  o.dir = dir;
  auto w = Writer::open(o);
  EXPECT_TRUE(w) << w.error().message;
  return w ? std::move(*w) : nullptr;
}

VerifyReport verify_ok(const std::vector<std::string>& paths) {
  auto r = verify(paths);
  EXPECT_TRUE(r) << r.error().message;
  if (!r) return {};
  EXPECT_TRUE(r->ok) << r->file << ":" << r->line << ": " << r->reason;
  return *r;
}

std::string live(const TempDir& d) {
  return d.path() + "/audit.jsonl";
}

TEST(Writer, WritesChainedLinesAndFlushMakesThemDurable) {
  TempDir dir;
  auto w = open_writer(dir.path());
  ASSERT_TRUE(w);
  for (int i = 0; i < 100; ++i) {
    auto seq = w->append(request(i));
    ASSERT_TRUE(seq) << seq.error().message;
    EXPECT_EQ(*seq, uint64_t(i + 1));
  }
  ASSERT_TRUE(w->flush());
  auto s = w->stats();
  EXPECT_EQ(s.durable_seq, 100u);
  EXPECT_EQ(s.written, 100u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_TRUE(s.healthy);
  auto lines = lines_of(slurp(live(dir)));
  ASSERT_EQ(lines.size(), 100u);
  EXPECT_EQ(lines[0].rfind("{\"ts\":\"", 0), 0u);
  EXPECT_NE(lines[0].find("\"seq\":1,\"event\":\"request\",\"sandbox\":\"sb-1\""),
            std::string::npos);
  EXPECT_NE(lines[0].find(",\"prev\":\"" + std::string(kGenesisPrev) + "\"}"), std::string::npos);
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, 100u);
  EXPECT_EQ(report.last_seq, 100u);
  struct stat st;
  ASSERT_EQ(stat(live(dir).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Writer, ResumesSeqAndChainAfterReopen) {
  TempDir dir;
  {
    auto w = open_writer(dir.path());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  {
    auto w = open_writer(dir.path());
    auto seq = w->append(request(10));
    ASSERT_TRUE(seq);
    EXPECT_EQ(*seq, 11u);
    ASSERT_TRUE(w->close());
  }
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, 11u);
  EXPECT_EQ(report.recoveries, 0u);
}

TEST(Writer, TornFinalLineIsCutAndRecordedOnReopen) {
  TempDir dir;
  {
    auto w = open_writer(dir.path());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  std::string intact = slurp(live(dir));
  std::string torn = "{\"ts\":\"2026-11-30T03:00:00.000000Z\",\"seq\":6,\"event\":\"req";
  spit(live(dir), intact + torn);
  ASSERT_FALSE(verify({dir.path()})->ok);  // the torn line is visible before recovery
  {
    auto w = open_writer(dir.path());
    ASSERT_TRUE(w);
    EXPECT_EQ(w->stats().recovered_bytes, torn.size());
    auto seq = w->append(request(6));
    ASSERT_TRUE(seq);
    EXPECT_EQ(*seq, 7u);  // 6 is the recovery event
    ASSERT_TRUE(w->close());
  }
  auto lines = lines_of(slurp(live(dir)));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(slurp(live(dir)).substr(0, intact.size()), intact);
  EXPECT_NE(lines[5].find("\"event\":\"audit_recovered\""), std::string::npos);
  EXPECT_NE(lines[5].find("\"cut_bytes\":" + std::to_string(torn.size())), std::string::npos);
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.recoveries, 1u);
  EXPECT_EQ(report.lines, 7u);
}

TEST(Writer, FileHoldingOnlyATornLineStartsAtGenesis) {
  TempDir dir;
  spit(live(dir), std::string(100, '\0'));  // zero-filled tail after a crash
  auto w = open_writer(dir.path());
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->append(request(0)));
  ASSERT_TRUE(w->close());
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, 2u);
  EXPECT_EQ(report.recoveries, 1u);
}

TEST(Writer, RefusesALogWhoseLastCompleteLineIsDamaged) {
  TempDir dir;
  {
    auto w = open_writer(dir.path());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  spit(live(dir), slurp(live(dir)) + "garbage\n");
  WriterOptions o;
  o.dir = dir.path();
  auto w = Writer::open(o);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("cordon audit verify"), std::string::npos);
}

TEST(Writer, RotatesBySizeAndContinuesTheChain) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 4096;
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_GT(names.size(), 3u);
  EXPECT_EQ(names.back(), "audit.jsonl");  // sorts last
  uint64_t previous_first = 0;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    auto seq = detail::rotated_seq(names[i]);
    ASSERT_TRUE(seq) << names[i];
    EXPECT_GT(*seq, previous_first);
    previous_first = *seq;
    std::string path = dir.path() + "/" + names[i];
    EXPECT_EQ(detail::first_seq_of(path), *seq);  // the name says where the file starts
    EXPECT_LE(fs::file_size(path), 4096u);
  }
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, 200u);
  EXPECT_EQ(report.files.size(), names.size());

  // Files given one by one in reverse order are put back into chain order.
  std::vector<std::string> reversed;
  for (auto it = names.rbegin(); it != names.rend(); ++it)
    reversed.push_back(dir.path() + "/" + *it);
  verify_ok(reversed);

  // Reopen continues in the live file.
  auto w = open_writer(dir.path(), o);
  auto seq = w->append(request(200));
  ASSERT_TRUE(seq);
  EXPECT_EQ(*seq, 201u);
  ASSERT_TRUE(w->close());
  EXPECT_EQ(verify_ok({dir.path()}).lines, 201u);
}

TEST(Writer, ResumesFromTheLastRotatedFileWhenTheLiveFileIsMissing) {
  TempDir dir;
  {
    auto w = open_writer(dir.path());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  fs::rename(live(dir), dir.path() + "/" + detail::rotated_name(1));
  auto w = open_writer(dir.path());
  auto seq = w->append(request(4));
  ASSERT_TRUE(seq);
  EXPECT_EQ(*seq, 5u);
  ASSERT_TRUE(w->close());
  EXPECT_EQ(verify_ok({dir.path()}).lines, 5u);
}

TEST(Writer, CompletesARotationInterruptedAfterTheLink) {
  TempDir dir;
  {
    auto w = open_writer(dir.path());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  // The crash left the live file linked under its rotated name too.
  fs::create_hard_link(live(dir), dir.path() + "/" + detail::rotated_name(1));
  auto w = open_writer(dir.path());
  ASSERT_TRUE(w->append(request(4)));
  ASSERT_TRUE(w->close());
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, 5u);
  EXPECT_EQ(report.files.size(), 2u);
}

TEST(Writer, OnlyOneWriterPerDirectory) {
  TempDir dir;
  auto first = open_writer(dir.path());
  ASSERT_TRUE(first);
  WriterOptions o;
  o.dir = dir.path();
  auto second = Writer::open(o);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("in use"), std::string::npos);
  ASSERT_TRUE(first->close());
  first.reset();
  EXPECT_TRUE(Writer::open(o));
}

TEST(Writer, RefusesBadEventsWithoutUsingASeq) {
  TempDir dir;
  auto w = open_writer(dir.path());
  Event bad;
  bad.event = "x";
  bad.add("prev", std::string("0000"));
  EXPECT_FALSE(w->append(bad));
  auto seq = w->append(request(0));
  ASSERT_TRUE(seq);
  EXPECT_EQ(*seq, 1u);
  EXPECT_EQ(w->stats().refused, 1u);
}

TEST(Writer, ClosedWriterRefusesAppends) {
  TempDir dir;
  auto w = open_writer(dir.path());
  ASSERT_TRUE(w->close());
  EXPECT_FALSE(w->append(request(0)));
  EXPECT_TRUE(w->close());  // idempotent
}

TEST(Writer, ConcurrentAppendsGetUniqueSeqsAndOneChain) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 64 * 1024;
  auto w = open_writer(dir.path(), o);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::vector<uint64_t>> seqs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto seq = w->append(request(i, "sb-" + std::to_string(t)));
        if (seq) seqs[size_t(t)].push_back(*seq);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(w->flush());
  std::set<uint64_t> all;
  for (auto& v : seqs) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t(kThreads * kEach));
  ASSERT_TRUE(w->close());
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, uint64_t(kThreads * kEach));
}

TEST(Writer, FullQueueRefusesAndNothingAcceptedIsLost) {
  TempDir dir;
  WriterOptions o;
  o.queue_events = 4;
  o.max_batch_events = 1;
  o.fsync_interval = std::chrono::milliseconds(0);  // every batch waits for the disk
  auto w = open_writer(dir.path(), o);
  uint64_t accepted = 0, refused = 0;
  std::string message;
  for (int i = 0; i < 20000 && refused < 100; ++i) {
    auto seq = w->append(request(i));
    if (seq) {
      ++accepted;
    } else {
      ++refused;
      message = seq.error().message;
    }
  }
  ASSERT_GT(refused, 0u) << "the writer kept up with 20000 appends into a queue of 4";
  EXPECT_NE(message.find("queue is full"), std::string::npos) << message;
  ASSERT_TRUE(w->flush());
  ASSERT_TRUE(w->close());
  EXPECT_EQ(verify_ok({dir.path()}).lines, accepted);
}

// Write failures for real: a file size limit makes write() fail with EFBIG part-way through a
// batch. The writer must refuse new events, keep the accepted ones, and write them all (without
// the partial bytes) once the limit is lifted.
TEST(Writer, WriteFailureRefusesAppendsAndRetriesUntilTheDiskTakesThem) {
  TempDir dir;
  WriterOptions o;
  o.retry_interval = std::chrono::milliseconds(20);
  o.fsync_interval = std::chrono::milliseconds(0);
  auto w = open_writer(dir.path(), o);
  ASSERT_TRUE(w);
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 3000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);

  uint64_t accepted = 0;
  std::string refusal;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto seq = w->append(request(int(accepted)));
    if (!seq) {
      refusal = seq.error().message;
      break;
    }
    ++accepted;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Status health = w->health();
  auto flushed = w->flush(std::chrono::milliseconds(100));
  auto stats = w->stats();

  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(refusal.empty()) << "appends never failed";
  EXPECT_NE(refusal.find("File too large"), std::string::npos) << refusal;
  EXPECT_FALSE(health);
  EXPECT_FALSE(flushed);
  EXPECT_FALSE(stats.healthy);
  EXPECT_GT(stats.write_failures, 0u);
  EXPECT_GT(stats.queued, 0u);  // accepted, kept for the retry

  // Limit lifted: the retry writes everything that was accepted.
  ASSERT_TRUE(w->flush(std::chrono::seconds(10)));
  EXPECT_TRUE(w->health());
  EXPECT_TRUE(w->append(request(0)));
  ++accepted;
  ASSERT_TRUE(w->close());
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.lines, accepted);
}

// The same with a real full file system: a tiny tmpfs (needs CAP_SYS_ADMIN).
TEST(Writer, DiskFullOnTmpfsRecoversWhenSpaceIsFreed) {
  TempDir dir;
  std::string mnt = dir.path() + "/mnt";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  std::string audit_dir = mnt + "/audit";
  WriterOptions o;
  o.retry_interval = std::chrono::milliseconds(20);
  o.fsync_interval = std::chrono::milliseconds(0);
  auto w = open_writer(audit_dir, o);
  ASSERT_TRUE(w);
  // Fill the file system, leaving a little room.
  std::string filler = mnt + "/filler";
  {
    std::string block(4096, 'x');
    FILE* f = std::fopen(filler.c_str(), "w");
    ASSERT_NE(f, nullptr);
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }
  uint64_t accepted = 0;
  std::string refusal;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto seq = w->append(request(int(accepted)));
    if (!seq) {
      refusal = seq.error().message;
      break;
    }
    ++accepted;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(refusal.empty());
  EXPECT_NE(refusal.find("No space left"), std::string::npos) << refusal;
  EXPECT_FALSE(w->health());
  fs::remove(filler);
  ASSERT_TRUE(w->flush(std::chrono::seconds(10)));
  EXPECT_TRUE(w->health());
  ASSERT_TRUE(w->close());
  EXPECT_EQ(verify_ok({audit_dir}).lines, accepted);
}

TEST(Writer, UsesTheInjectedClock) {
  TempDir dir;
  WriterOptions o;
  o.clock = [] { return *parse_rfc3339("2026-01-02T03:04:05.678901Z"); };
  auto w = open_writer(dir.path(), o);
  ASSERT_TRUE(w->append(request(0)));
  ASSERT_TRUE(w->close());
  EXPECT_EQ(slurp(live(dir)).rfind("{\"ts\":\"2026-01-02T03:04:05.678901Z\",\"seq\":1,", 0), 0u);
}

}  // namespace
}  // namespace cordon::audit

// ---- retention -------------------------------------------------------------------------------

namespace cordon::audit {
namespace {

std::vector<std::string> log_files(const TempDir& d) {
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(d.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t bytes_on_disk(const TempDir& d) {
  uint64_t n = 0;
  for (auto& e : fs::directory_iterator(d.path())) n += e.file_size();
  return n;
}

TEST(Retention, BySizeRemovesOldFilesAndWhatIsLeftVerifiesAndQueries) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 4096;
  o.retention.max_total_bytes = 16 * 1024;
  uint64_t disk = 0;
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 600; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
    disk = w->disk_bytes();
    EXPECT_GT(w->stats().removed_files, 0u);
  }
  EXPECT_LE(bytes_on_disk(dir), 16u * 1024 + 4096) << [&] {
    std::string t;
    for (auto& n : log_files(dir))
      t += n + " " + std::to_string(fs::file_size(dir.path() + "/" + n)) + "\n";
    return t;
  }();
  EXPECT_EQ(disk, bytes_on_disk(dir));  // the /metrics figure is what is on disk
  // Verifiable as it is (no --partial): anchored at the first kept line.
  auto report = verify_ok({dir.path()});
  EXPECT_TRUE(report.anchored);
  EXPECT_GT(report.first_seq, 1u);
  // Every kept line is found by a query, across the kept files, in chain order.
  uint64_t seen = 0, last = 0;
  bool ordered = true;
  auto q = query({dir.path()}, {}, [&](const Record& r) {
    uint64_t seq = std::stoull(*r.get("seq"));
    ordered = ordered && seq > last;
    last = seq;
    ++seen;
    return true;
  });
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(seen, report.lines);
  EXPECT_TRUE(ordered);
  EXPECT_EQ(q->invalid, 0u);
  QueryFilter f;
  f.event = "audit_retention";
  uint64_t retention_lines = 0;
  ASSERT_TRUE(query({dir.path()}, f, [&](const Record&) { return ++retention_lines, true; }));
  EXPECT_GE(retention_lines, 1u);

  // A reopened writer continues the chain; still verifiable.
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  EXPECT_TRUE(verify_ok({dir.path()}).anchored);

  // Removing one more file by hand is not covered by any anchor: tampering, reported.
  auto names = log_files(dir);
  ASSERT_GE(names.size(), 3u);
  fs::remove(dir.path() + "/" + names.front());
  auto broken = verify({dir.path()});
  ASSERT_TRUE(broken);
  EXPECT_FALSE(broken->ok);
  EXPECT_NE(broken->reason.find("starts at seq"), std::string::npos) << broken->reason;
}

TEST(Retention, ByFileCount) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 4096;
  o.retention.max_total_bytes = 0;
  o.retention.max_files = 3;
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 400; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  // Between rotations one more rotated file may wait for the next pass.
  EXPECT_LE(log_files(dir).size(), 4u);
  EXPECT_TRUE(verify_ok({dir.path()}).anchored);
}

TEST(Retention, ByAgeAtOpen) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 4096;
  o.retention.max_total_bytes = 0;
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  auto before = log_files(dir);
  ASSERT_GE(before.size(), 4u);
  // Every rotated file but the newest is 10 days old.
  for (size_t i = 0; i + 2 < before.size(); ++i)
    fs::last_write_time(dir.path() + "/" + before[i],
                        fs::file_time_type::clock::now() - std::chrono::hours(240));
  o.retention.max_age = std::chrono::hours(24);
  {
    auto w = open_writer(dir.path(), o);
    ASSERT_TRUE(w->close());
  }
  auto after = log_files(dir);
  EXPECT_EQ(after.size(), 2u);  // the newest rotated file (the anchor) and the live one
  auto report = verify_ok({dir.path()});
  EXPECT_TRUE(report.anchored);
}

TEST(Retention, OffKeepsEverything) {
  TempDir dir;
  WriterOptions o;
  o.rotate_bytes = 4096;
  o.retention.max_total_bytes = 0;
  {
    auto w = open_writer(dir.path(), o);
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(w->append(request(i)));
    ASSERT_TRUE(w->close());
  }
  auto report = verify_ok({dir.path()});
  EXPECT_EQ(report.first_seq, 1u);
  EXPECT_EQ(report.lines, 300u);
}

}  // namespace
}  // namespace cordon::audit
