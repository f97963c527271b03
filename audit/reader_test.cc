#include "audit/reader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "audit/audit_test_util.h"
#include "audit/detail/files.h"
#include "audit/writer.h"

namespace cordon::audit {
namespace {

using test::join_lines;
using test::lines_of;
using test::slurp;
using test::spit;
using test::TempDir;
namespace fs = std::filesystem;

// A log of `n` lines, one per minute from 2026-11-30T00:00:00Z, sandboxes sb-0..sb-2,
// every third a deny, hosts alternating between two names.
void write_log(const std::string& dir, int n, uint64_t rotate_bytes = 64ull << 20) {
  auto base = *parse_rfc3339("2026-11-30T00:00:00Z");
  auto counter = std::make_shared<std::atomic<int>>(0);
  WriterOptions o;
  o.dir = dir;
  o.rotate_bytes = rotate_bytes;
  o.clock = [base, counter] { return base + std::chrono::minutes(counter->fetch_add(1)); };
  auto w = Writer::open(o);
  ASSERT_TRUE(w) << w.error().message;
  for (int i = 0; i < n; ++i) {
    Event e;
    e.event = i % 10 == 9 ? "connection_refused" : "request";
    e.sandbox = "sb-" + std::to_string(i % 3);
    e.decision = i % 3 == 0 ? "deny" : "allow";
    e.reason = i % 3 == 0 ? "no route matched" : "route matched";
    e.rule = i % 3 == 0 ? "" : "github-api/repos";
    e.add("method", std::string(i % 2 ? "GET" : "POST"))
        .add("host", std::string(i % 2 ? "api.github.com" : "Uploads.Example.com"))
        .add("path", "/p/" + std::to_string(i));
    ASSERT_TRUE((*w)->append(e));
  }
  ASSERT_TRUE((*w)->close());
}

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_log(dir_.path(), 10);
    lines_ = lines_of(slurp(path()));
    ASSERT_EQ(lines_.size(), 10u);
  }
  std::string path() const { return dir_.path() + "/audit.jsonl"; }
  VerifyReport run(VerifyOptions o = {}) {
    auto r = verify({dir_.path()}, o);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : VerifyReport{};
  }
  void rewrite(const std::vector<std::string>& lines) { spit(path(), join_lines(lines)); }
  TempDir dir_;
  std::vector<std::string> lines_;
};

TEST_F(VerifyTest, IntactLogIsOk) {
  auto r = run();
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.lines, 10u);
  EXPECT_EQ(r.first_seq, 1u);
  EXPECT_EQ(r.last_seq, 10u);
  EXPECT_EQ(r.head.size(), 64u);
  EXPECT_FALSE(r.partial);
}

TEST_F(VerifyTest, EditedLineIsCaughtAtTheNextLine) {
  auto lines = lines_;
  size_t pos = lines[4].find("\"decision\":\"allow\"");
  ASSERT_NE(pos, std::string::npos);
  lines[4].replace(pos, 18, "\"decision\":\"deny\" ");
  lines[4].erase(pos + 17, 1);
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 6u);
  EXPECT_EQ(r.file, path());
  EXPECT_NE(r.reason.find("prev does not match"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find(":5)"), std::string::npos) << r.reason;
}

TEST_F(VerifyTest, DeletedLineIsReported) {
  auto lines = lines_;
  lines.erase(lines.begin() + 3);
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 4u);
  EXPECT_NE(r.reason.find("seq 5 where 4 was expected"), std::string::npos) << r.reason;
}

TEST_F(VerifyTest, InsertedLineIsReported) {
  auto lines = lines_;
  lines.insert(lines.begin() + 2, lines[1]);  // a replayed copy
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 3u);
}

TEST_F(VerifyTest, ForgedInsertedLineWithRenumberingIsReported) {
  // Insert a made-up line with the right seq and prev; the following line's prev breaks.
  auto lines = lines_;
  std::string forged = lines[2];
  size_t pos = forged.find("\"path\":\"/p/2\"");
  ASSERT_NE(pos, std::string::npos);
  forged.replace(pos, 13, "\"path\":\"/p/X\"");
  lines[2] = forged;
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 4u);
}

TEST_F(VerifyTest, ReorderedLinesAreReported) {
  auto lines = lines_;
  std::swap(lines[6], lines[7]);
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 7u);
  EXPECT_NE(r.reason.find("seq 8 where 7"), std::string::npos) << r.reason;
}

TEST_F(VerifyTest, TruncatedFileIsReported) {
  std::string text = slurp(path());
  spit(path(), text.substr(0, text.size() - 30));
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 10u);
  EXPECT_NE(r.reason.find("incomplete line"), std::string::npos) << r.reason;
}

TEST_F(VerifyTest, DeletedFirstLineIsReportedUnlessPartialIsAllowed) {
  auto lines = lines_;
  lines.erase(lines.begin());
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 1u);
  EXPECT_NE(r.reason.find("starts at seq 2"), std::string::npos) << r.reason;
  auto partial = run(VerifyOptions{.allow_partial = true});
  EXPECT_TRUE(partial.ok) << partial.reason;
  EXPECT_TRUE(partial.partial);
  EXPECT_EQ(partial.first_seq, 2u);
}

TEST_F(VerifyTest, ForgedGenesisIsReported) {
  auto lines = lines_;
  size_t pos = lines[0].find(std::string(kGenesisPrev));
  lines[0].replace(pos, 1, "1");
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 1u);
}

TEST_F(VerifyTest, GarbageAndDuplicateFieldsAreReported) {
  auto lines = lines_;
  lines[3] = "not json";
  rewrite(lines);
  auto r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 4u);
  EXPECT_NE(r.reason.find("not a valid audit record"), std::string::npos);

  lines = lines_;
  size_t pos = lines[9].find(",\"prev\"");
  lines[9].insert(pos, ",\"decision\":\"allow\"");
  rewrite(lines);
  r = run();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.line, 10u);
  EXPECT_NE(r.reason.find("twice"), std::string::npos) << r.reason;
}

TEST_F(VerifyTest, MissingFileIsAnError) {
  EXPECT_FALSE(verify({dir_.path() + "/nope.jsonl"}));
  TempDir empty;
  EXPECT_FALSE(verify({empty.path()}));
}

TEST(VerifyRotated, RemovedOrEditedRotatedFileIsReportedAtTheNextFile) {
  TempDir dir;
  write_log(dir.path(), 120, 2048);
  std::vector<std::string> rotated;
  for (auto& e : fs::directory_iterator(dir.path()))
    if (detail::rotated_seq(e.path().filename().string())) rotated.push_back(e.path().string());
  std::sort(rotated.begin(), rotated.end());
  ASSERT_GE(rotated.size(), 3u);
  ASSERT_TRUE(verify({dir.path()})->ok);

  // Edit the last line of the second file: caught at line 1 of the third.
  std::string saved = slurp(rotated[1]);
  auto lines = lines_of(saved);
  size_t pos = lines.back().find("\"/p/");
  lines.back().replace(pos, 4, "\"/q/");
  spit(rotated[1], join_lines(lines));
  auto r = verify({dir.path()});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->file, rotated[2]);
  EXPECT_EQ(r->line, 1u);
  spit(rotated[1], saved);
  ASSERT_TRUE(verify({dir.path()})->ok);

  // Remove the second file.
  fs::rename(rotated[1], dir.path() + "/elsewhere");
  r = verify({dir.path()});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->file, rotated[2]);
  EXPECT_EQ(r->line, 1u);
  EXPECT_NE(r->reason.find("removed"), std::string::npos) << r->reason;
}

TEST(Query, FiltersBySandboxDecisionRuleEventAndHost) {
  TempDir dir;
  write_log(dir.path(), 300, 8192);
  auto count = [&](QueryFilter f) {
    uint64_t n = 0;
    auto stats = query({dir.path()}, f, [&](const Record&) {
      ++n;
      return true;
    });
    EXPECT_TRUE(stats) << stats.error().message;
    if (stats) {
      EXPECT_EQ(stats->matched, n);
      EXPECT_EQ(stats->lines, 300u);
      EXPECT_EQ(stats->invalid, 0u);
    }
    return n;
  };
  EXPECT_EQ(count({}), 300u);
  EXPECT_EQ(count({.sandbox = "sb-1"}), 100u);
  EXPECT_EQ(count({.decision = "deny"}), 100u);
  EXPECT_EQ(count({.sandbox = "sb-0", .decision = "deny"}), 100u);  // i%3==0 both
  EXPECT_EQ(count({.sandbox = "sb-1", .decision = "deny"}), 0u);
  EXPECT_EQ(count({.rule = "github-api/repos"}), 200u);
  EXPECT_EQ(count({.event = "connection_refused"}), 30u);
  EXPECT_EQ(count({.host = "api.github.com"}), 150u);
  EXPECT_EQ(count({.host = "API.GITHUB.COM"}), 150u);
  EXPECT_EQ(count({.host = "uploads.example.com"}), 150u);
  EXPECT_EQ(count({.host = "*.example.com"}), 150u);
  EXPECT_EQ(count({.host = "*.github.com"}), 150u);
  EXPECT_EQ(count({.host = "*.api.github.com"}), 0u);
  EXPECT_EQ(count({.host = "example.com"}), 0u);
  EXPECT_EQ(count({.sandbox = "nobody"}), 0u);
}

TEST(Query, FiltersByTimeRangeAcrossRotatedFiles) {
  TempDir dir;
  write_log(dir.path(), 300, 8192);  // one line per minute from 00:00
  QueryFilter f;
  f.since = parse_rfc3339("2026-11-30T01:00:00Z");
  f.until = parse_rfc3339("2026-11-30T02:00:00Z");
  std::vector<std::string> seqs;
  auto stats = query({dir.path()}, f, [&](const Record& r) {
    seqs.push_back(*r.get("seq"));
    return true;
  });
  ASSERT_TRUE(stats);
  EXPECT_GT(stats->files.size(), 2u);
  ASSERT_EQ(seqs.size(), 60u);
  EXPECT_EQ(seqs.front(), "61");
  EXPECT_EQ(seqs.back(), "120");
  // Offsets in the filter are honoured.
  f.since = parse_rfc3339("2026-11-30T03:00:00+02:00");  // 01:00Z
  f.until = parse_rfc3339("2026-11-30T01:00:00.000001Z");
  seqs.clear();
  ASSERT_TRUE(query({dir.path()}, f, [&](const Record& r) {
    seqs.push_back(*r.get("seq"));
    return true;
  }));
  EXPECT_EQ(seqs, std::vector<std::string>{"61"});
}

TEST(Query, RecordsGiveUnescapedValuesAndStopEarly) {
  TempDir dir;
  {
    WriterOptions o;
    o.dir = dir.path();
    auto w = Writer::open(o);
    ASSERT_TRUE(w);
    Event e;
    e.event = "request";
    e.sandbox = "sb\"1\n";
    e.add("host", std::string("h.example")).add("n", int64_t(-5)).add("b", false);
    ASSERT_TRUE((*w)->append(e));
    ASSERT_TRUE((*w)->append(e));
    ASSERT_TRUE((*w)->close());
  }
  int calls = 0;
  auto stats = query({dir.path()}, {.sandbox = "sb\"1\n"}, [&](const Record& r) {
    ++calls;
    EXPECT_EQ(*r.get("sandbox"), "sb\"1\n");
    EXPECT_EQ(*r.get("n"), "-5");
    EXPECT_EQ(*r.get("b"), "false");
    EXPECT_FALSE(r.get("missing"));
    EXPECT_EQ(r.line_number(), 1u);
    EXPECT_EQ(r.line().find('\n'), std::string_view::npos);
    return false;
  });
  ASSERT_TRUE(stats);
  EXPECT_EQ(calls, 1);
}

TEST(Query, SkipsAndCountsLinesThatAreNotRecords) {
  TempDir dir;
  write_log(dir.path(), 5);
  std::string path = dir.path() + "/audit.jsonl";
  spit(path, slurp(path) + "junk\n{\"ts\":1}\n");
  uint64_t n = 0;
  auto stats = query({path}, {}, [&](const Record&) {
    ++n;
    return true;
  });
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->invalid, 2u);
  EXPECT_EQ(n, 5u);
  // With a filter the lines are scanned; the bad ones are still counted, never matched.
  n = 0;
  stats = query({path}, {.sandbox = "sb-1"}, [&](const Record&) {
    ++n;
    return true;
  });
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->invalid, 1u);  // {"ts":1} is an object without a sandbox: no match
  EXPECT_EQ(n, 2u);
}

TEST(Query, LinesLongerThanTheReadBufferAreRead) {
  TempDir dir;
  WriterOptions o;
  o.dir = dir.path();
  auto w = Writer::open(o);
  ASSERT_TRUE(w);
  Event e;
  e.event = "big";
  for (int i = 0; i < 30; ++i) e.add("f" + std::to_string(i), std::string(4096, '\x01'));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->append(e));
  ASSERT_TRUE((*w)->close());
  uint64_t n = 0;
  auto stats = query({dir.path()}, {.event = "big"}, [&](const Record& r) {
    EXPECT_EQ(r.get("f29")->size(), 4096u);
    ++n;
    return true;
  });
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(n, 3u);
  EXPECT_TRUE(verify({dir.path()})->ok);
}

}  // namespace
}  // namespace cordon::audit
