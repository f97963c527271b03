// AuditScope writes exactly one line per decision; the audit enums keep their historic words.
#include "gateway/detail/audit_scope.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gateway/detail/impl.h"
#include "gateway/testing/fakes.h"

namespace cordon::gateway::detail {
namespace {

struct AuditScopeTest : ::testing::Test {
  AuditScopeTest() {
    audit = std::make_shared<testing::MemoryAudit>();
    impl.ports.audit = audit;
  }
  AuditRecord request(const std::string& id) {
    AuditRecord r;
    r.kind = AuditKind::kRequest;
    r.request_id = id;
    r.host = "api.test";
    return r;
  }
  std::shared_ptr<testing::MemoryAudit> audit;
  Gateway::Impl impl;
};

TEST_F(AuditScopeTest, CommitWritesOnceAndCountsOnce) {
  {
    AuditScope scope(impl, request("r1"));
    scope->decision = AuditDecision::kAllow;
    scope->reason = "allowed";
    scope->bytes_down = 7;
    EXPECT_TRUE(scope.commit());
    EXPECT_TRUE(scope.committed());
    scope->reason = "changed after the commit";
    EXPECT_FALSE(scope.commit());  // a no-op: the line is written already
  }                                // committed: the destructor writes nothing
  auto recs = audit->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].request_id, "r1");
  EXPECT_EQ(recs[0].decision, AuditDecision::kAllow);
  EXPECT_EQ(recs[0].reason, "allowed");
  EXPECT_EQ(impl.metrics.requests_allow.load(), 1u);
  EXPECT_EQ(impl.metrics.requests_error.load(), 0u);
  EXPECT_EQ(impl.metrics.bytes_down.load(), 7u);
  EXPECT_EQ(impl.metrics.latency_count.load(), 1u);
}

TEST_F(AuditScopeTest, EndingWithoutCommitWritesTheErrorLine) {
  {
    AuditScope scope(impl, request("r2"));
    scope->decision = AuditDecision::kAllow;  // decided, then the path forgot its line
    scope->reason = "allowed";
  }
  auto recs = audit->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].request_id, "r2");
  EXPECT_EQ(recs[0].host, "api.test");  // what was known is kept
  EXPECT_EQ(recs[0].decision, AuditDecision::kError);
  EXPECT_EQ(recs[0].reason, "unaudited_exit");
  EXPECT_EQ(impl.metrics.requests_error.load(), 1u);
  EXPECT_EQ(impl.metrics.requests_allow.load(), 0u);
}

TEST_F(AuditScopeTest, AnExceptionStillLeavesTheLine) {
  auto run = [&] {
    AuditScope scope(impl, request("r3"));
    throw std::runtime_error("component failed");
  };
  EXPECT_THROW(run(), std::runtime_error);
  auto recs = audit->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reason, "unaudited_exit");
}

TEST_F(AuditScopeTest, UncountedScopeLeavesTheRequestCounters) {
  {
    AuditRecord r;
    r.kind = AuditKind::kConnection;
    AuditScope scope(impl, r, AuditCounting::kNone);
    scope->decision = AuditDecision::kAllow;
    scope->bytes_up = 5;
    EXPECT_TRUE(scope.commit());
  }
  { AuditScope forgotten(impl, {}, AuditCounting::kNone); }
  EXPECT_EQ(audit->records().size(), 2u);
  EXPECT_EQ(impl.metrics.requests_allow.load() + impl.metrics.requests_error.load(), 0u);
  EXPECT_EQ(impl.metrics.bytes_up.load(), 0u);
}

TEST_F(AuditScopeTest, SinkFailureIsReportedAndNotRetried) {
  audit->fail_next_appends(1);
  AuditScope scope(impl, request("r4"));
  scope->decision = AuditDecision::kDeny;
  EXPECT_FALSE(scope.commit());  // the sink failed: the gateway fails closed
  EXPECT_TRUE(scope.committed());
  EXPECT_FALSE(scope.commit());
  EXPECT_TRUE(audit->records().empty());
  EXPECT_EQ(impl.metrics.audit_failures.load(), 1u);
  EXPECT_EQ(impl.metrics.requests_deny.load(), 1u);  // counted as decided, as before
}

TEST_F(AuditScopeTest, SecretsAreRedactedFromTheLine) {
  std::vector<std::string> secrets{"s3cr3t-value-long-enough"};
  {
    AuditScope scope(impl, request("r5"));
    scope.redact(&secrets);
    scope->path = "/x?k=s3cr3t-value-long-enough";
  }  // the unaudited line is redacted too
  auto recs = audit->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].path.find("s3cr3t"), std::string::npos) << recs[0].path;
}

// The words in the audit log (and `cordon audit query --event/--decision`) never change.
TEST(AuditEnums, EveryValueKeepsItsHistoricWord) {
  EXPECT_EQ(to_string(AuditKind::kRequest), "request");
  EXPECT_EQ(to_string(AuditKind::kConnection), "connection");
  EXPECT_EQ(to_string(AuditKind::kConnectionCut), "connection_cut");
  EXPECT_EQ(to_string(AuditKind::kDns), "dns");
  EXPECT_EQ(to_string(AuditDecision::kAllow), "allow");
  EXPECT_EQ(to_string(AuditDecision::kDeny), "deny");
  EXPECT_EQ(to_string(AuditDecision::kError), "error");
}

}  // namespace
}  // namespace cordon::gateway::detail
