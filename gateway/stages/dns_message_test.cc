// DNS query parser and response builder. Threat 25 (data in DNS labels) is a policy matter for
// the responder; here: the parser refuses every malformed shape and caps labels and names.
#include "gateway/stages/dns_message.h"

#include <gtest/gtest.h>

#include "gateway/stages/limits.h"

namespace cordon::gateway {
namespace {

std::string u16(unsigned v) {
  return std::string{char(v >> 8), char(v & 0xff)};
}

std::string header(unsigned id, unsigned flags, unsigned qd, unsigned an = 0, unsigned ns = 0,
                   unsigned ar = 0) {
  return u16(id) + u16(flags) + u16(qd) + u16(an) + u16(ns) + u16(ar);
}

std::string name(std::initializer_list<std::string> labels) {
  std::string out;
  for (const auto& l : labels) out += char(l.size()) + l;
  return out + '\0';
}

std::string opt(unsigned udp = 1232) {
  return std::string(1, '\0') + u16(41) + u16(udp) + std::string(4, '\0') + u16(0);
}

std::string query(std::initializer_list<std::string> labels, unsigned qtype = 1) {
  return header(0x1234, 0x0100, 1) + name(labels) + u16(qtype) + u16(1);
}

TEST(DnsParse, SimpleQuery) {
  auto q = parse_dns_query(query({"API", "Example", "com"}));
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_EQ(q->name, "api.example.com");
  EXPECT_EQ(q->qtype, dns_type::kA);
  EXPECT_EQ(q->qclass, 1);
  EXPECT_EQ(q->label_count, 3u);
  EXPECT_FALSE(q->has_edns);
}

TEST(DnsParse, RootAndEdns) {
  std::string p = header(7, 0, 1, 0, 0, 1) + std::string(1, '\0') + u16(2) + u16(1) + opt(4096);
  auto q = parse_dns_query(p);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->name, "");
  EXPECT_TRUE(q->has_edns);
  EXPECT_EQ(q->edns_udp_size, 4096);
}

TEST(DnsParse, LabelAndNameCaps) {
  EXPECT_TRUE(parse_dns_query(query({std::string(63, 'a'), "example"})));
  auto long_label = parse_dns_query(query({std::string(64, 'a'), "example"}));
  ASSERT_FALSE(long_label);
  // 4 labels of 63 = 4 * 64 + 1 = 257 bytes > 255.
  auto long_name = parse_dns_query(query(
      {std::string(63, 'a'), std::string(63, 'b'), std::string(63, 'c'), std::string(63, 'd')}));
  ASSERT_FALSE(long_name);
  EXPECT_NE(long_name.error().message.find("255"), std::string::npos);
  // 3 x 63 + 61 = 4*... exactly 255 in wire form: 64*3 + 62 + 1 = 255.
  EXPECT_TRUE(parse_dns_query(query(
      {std::string(63, 'a'), std::string(63, 'b'), std::string(63, 'c'), std::string(61, 'd')})));
}

struct Bad {
  const char* name;
  std::string packet;
  DnsRcode rcode;
};

std::vector<Bad> bad_packets() {
  std::string ok = query({"a", "example"});
  std::vector<Bad> v;
  v.push_back({"Empty", "", DnsRcode::kFormErr});
  v.push_back({"ShortHeader", ok.substr(0, 11), DnsRcode::kFormErr});
  for (size_t cut = 12; cut < ok.size(); ++cut) {
    v.push_back({"Truncated", ok.substr(0, cut), DnsRcode::kFormErr});
  }
  v.push_back(
      {"Response", header(1, 0x8000, 1) + name({"a"}) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back(
      {"OpcodeStatus", header(1, 2 << 11, 1) + name({"a"}) + u16(1) + u16(1), DnsRcode::kNotImp});
  v.push_back({"TcSet", header(1, 0x0200, 1) + name({"a"}) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back({"QdZero", header(1, 0, 0), DnsRcode::kFormErr});
  v.push_back({"QdTwo",
               header(1, 0, 2) + name({"a"}) + u16(1) + u16(1) + name({"b"}) + u16(1) + u16(1),
               DnsRcode::kFormErr});
  v.push_back(
      {"AnswerInQuery", header(1, 0, 1, 1) + name({"a"}) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back({"TwoAdditional",
               header(1, 0, 1, 0, 0, 2) + name({"a"}) + u16(1) + u16(1) + opt() + opt(),
               DnsRcode::kFormErr});
  v.push_back({"AdditionalNotOpt",
               header(1, 0, 1, 0, 0, 1) + name({"a"}) + u16(1) + u16(1) + std::string(1, '\0') +
                   u16(1) + u16(1) + std::string(4, '\0') + u16(4) + "abcd",
               DnsRcode::kFormErr});
  v.push_back({"OptTruncated",
               header(1, 0, 1, 0, 0, 1) + name({"a"}) + u16(1) + u16(1) + opt().substr(0, 8),
               DnsRcode::kFormErr});
  v.push_back({"Trailing", ok + "x", DnsRcode::kFormErr});
  // Compression: self pointer, forward pointer, pointer into the header, loop via two names.
  v.push_back(
      {"PointerToSelf", header(1, 0, 1) + u16(0xc00c) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back({"PointerForward",
               header(1, 0, 1) +
                   std::string("\x01"
                               "a",
                               2) +
                   u16(0xc020) + u16(1) + u16(1) + std::string(20, '\0'),
               DnsRcode::kFormErr});
  v.push_back(
      {"PointerIntoHeader", header(1, 0, 1) + u16(0xc002) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back({"PointerBackToOwnStart",
               header(1, 0, 1) +
                   std::string("\x01"
                               "a",
                               2) +
                   u16(0xc00c) + u16(1) + u16(1),
               DnsRcode::kFormErr});
  v.push_back(
      {"PointerOutOfRange", header(1, 0, 1) + u16(0xffff) + u16(1) + u16(1), DnsRcode::kFormErr});
  v.push_back({"PointerTruncated", header(1, 0, 1) + std::string("\xc0", 1), DnsRcode::kFormErr});
  v.push_back({"ExtendedLabelType",
               header(1, 0, 1) +
                   std::string("\x41"
                               "a",
                               2) +
                   u16(1) + u16(1),
               DnsRcode::kFormErr});
  v.push_back({"LabelWithDot", query({"a.b", "example"}), DnsRcode::kFormErr});
  v.push_back({"LabelWithNul", query({std::string("a\0b", 3)}), DnsRcode::kFormErr});
  v.push_back({"LabelWithSpace", query({"a b"}), DnsRcode::kFormErr});
  v.push_back({"LabelHighBit", query({"caf\xc3\xa9"}), DnsRcode::kFormErr});
  v.push_back({"OptQuestion", query({"a"}, 41), DnsRcode::kFormErr});
  v.push_back({"Huge", query({"a"}) + std::string(kMaxDnsQueryBytes, 'x'), DnsRcode::kFormErr});
  return v;
}

TEST(DnsParse, RefusesMalformed) {
  for (const auto& b : bad_packets()) {
    SCOPED_TRACE(b.name);
    auto q = parse_dns_query(b.packet);
    ASSERT_FALSE(q) << "accepted " << b.name;
    EXPECT_EQ(q.error().code, int(b.rcode)) << q.error().message;
  }
}

TEST(DnsParse, MessageId) {
  EXPECT_FALSE(dns_message_id("short"));
  EXPECT_EQ(*dns_message_id(query({"a"})), 0x1234);
}

TEST(DnsBuild, AnswersMatchingFamilyWithPointerAndEcho0x20Case) {
  auto q = parse_dns_query(header(0xbeef, 0x0100, 1, 0, 0, 1) + name({"ApI", "eXample"}) +
                           u16(dns_type::kA) + u16(1) + opt());
  ASSERT_TRUE(q) << q.error().message;
  std::string v4a("\xc0\x00\x02\x01", 4), v4b("\xc0\x00\x02\x02", 4), v6(16, '\x20');
  std::string r = build_dns_response(*q, DnsRcode::kNoError, {v4a, v6, v4b}, 30);
  // Header: id, flags QR|RD|RA, 1 question, 2 answers, 0, 1 (OPT).
  EXPECT_EQ(r.substr(0, 12), u16(0xbeef) + u16(0x8180) + u16(1) + u16(2) + u16(0) + u16(1));
  std::string qname = name({"ApI", "eXample"});
  EXPECT_EQ(r.substr(12, qname.size()), qname);  // original case echoed
  size_t p = 12 + qname.size() + 4;
  std::string rr = u16(0xc00c) + u16(1) + u16(1) + std::string("\x00\x00\x00\x1e", 4) + u16(4);
  EXPECT_EQ(r.substr(p, rr.size()), rr);
  EXPECT_EQ(r.substr(p + rr.size(), 4), v4a);
  p += 2 * (rr.size() + 4);
  EXPECT_EQ(r.substr(p), opt(kDnsEdnsUdpSize));
  // The response itself is a well-formed message that names the same question.
  EXPECT_EQ(r.size(), p + 11);
}

TEST(DnsBuild, NxdomainRefusedNodata) {
  auto q = parse_dns_query(query({"evil", "example"}, dns_type::kAAAA));
  ASSERT_TRUE(q);
  std::string nx = build_dns_response(*q, DnsRcode::kNxDomain, {std::string(16, '\1')});
  EXPECT_EQ(nx.substr(2, 2), u16(0x8183));
  EXPECT_EQ(nx.substr(6, 2), u16(0));  // no answers with NXDOMAIN
  std::string refused = build_dns_response(*q, DnsRcode::kRefused);
  EXPECT_EQ(refused.substr(2, 2), u16(0x8185));
  std::string nodata = build_dns_response(*q, DnsRcode::kNoError, {std::string(4, '\1')});
  EXPECT_EQ(nodata.substr(6, 2), u16(0));  // A address for an AAAA query: NODATA
  std::string err = build_dns_error(0x4242, DnsRcode::kFormErr);
  EXPECT_EQ(err, u16(0x4242) + u16(0x8081) + std::string(8, '\0'));
}

TEST(DnsBuild, AnswerCountCapped) {
  auto q = parse_dns_query(query({"a", "example"}));
  ASSERT_TRUE(q);
  std::vector<std::string> many(100, std::string(4, '\x0a'));
  std::string r = build_dns_response(*q, DnsRcode::kNoError, many, 1);
  EXPECT_EQ(r.substr(6, 2), u16(kMaxDnsAnswers));
}

// ---- resolver side ----

// A response as a server would build it: the question as queried, answers after it.
std::string response(uint16_t id, uint16_t flags, const std::vector<std::string>& answers,
                     const std::string& qname, uint16_t qtype = dns_type::kA) {
  return header(id, flags, 1, uint16_t(answers.size()), 0, 0) + qname + u16(qtype) + u16(1) + [&] {
    std::string all;
    for (const auto& a : answers) all += a;
    return all;
  }();
}
std::string rr(const std::string& owner, uint16_t type, uint32_t ttl, const std::string& data) {
  return owner + u16(type) + u16(1) + u16(uint16_t(ttl >> 16)) + u16(uint16_t(ttl)) +
         u16(uint16_t(data.size())) + data;
}

TEST(DnsResolver, QueryRoundTripsThroughTheQueryParser) {
  auto built = build_dns_query(0x5151, "api.example.com", dns_type::kAAAA);
  ASSERT_TRUE(built) << built.error().message;
  auto q = parse_dns_query(*built);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 0x5151);
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_EQ(q->name, "api.example.com");
  EXPECT_EQ(q->qtype, dns_type::kAAAA);
  EXPECT_EQ(q->qclass, 1);
  EXPECT_TRUE(q->has_edns);
  EXPECT_FALSE(build_dns_query(1, "", dns_type::kA));
  EXPECT_FALSE(build_dns_query(1, "a..b", dns_type::kA));
  EXPECT_FALSE(build_dns_query(1, std::string(64, 'a') + ".com", dns_type::kA));
  EXPECT_FALSE(build_dns_query(1, "a b.com", dns_type::kA));
}

TEST(DnsResolver, AnswersOfTheQuestionAndItsCnameChainOnly) {
  std::string qn = name({"Api", "example"});  // 0x20 case from the server is fine
  std::string v4("\xc0\x00\x02\x07", 4), other("\x0a\x00\x00\x01", 4);
  std::string cname_target = name({"edge", "cdn"});
  std::string r =
      response(7, 0x8180,
               {rr(u16(0xc00c), dns_type::kCname, 300, cname_target),
                rr(name({"evil", "example"}), dns_type::kA, 5, other),  // unrelated name: ignored
                rr(cname_target, dns_type::kA, 60, v4)},
               qn);
  auto a = parse_dns_response(r, 7, "api.example", dns_type::kA);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->rcode, DnsRcode::kNoError);
  ASSERT_EQ(a->addresses.size(), 1u);
  EXPECT_EQ(a->addresses[0], v4);
  EXPECT_EQ(a->min_ttl_seconds, 60u);
}

TEST(DnsResolver, ResponsesToAnotherQuestionAreRefused) {
  std::string v4("\xc0\x00\x02\x07", 4);
  std::string ok =
      response(9, 0x8180, {rr(u16(0xc00c), dns_type::kA, 1, v4)}, name({"a", "example"}));
  ASSERT_TRUE(parse_dns_response(ok, 9, "a.example", dns_type::kA));
  EXPECT_FALSE(parse_dns_response(ok, 10, "a.example", dns_type::kA));    // id
  EXPECT_FALSE(parse_dns_response(ok, 9, "b.example", dns_type::kA));     // name
  EXPECT_FALSE(parse_dns_response(ok, 9, "a.example", dns_type::kAAAA));  // type
  std::string query_not_response = ok;
  query_not_response[2] = 0x01;  // QR unset
  EXPECT_FALSE(parse_dns_response(query_not_response, 9, "a.example", dns_type::kA));
  // An A record of the wrong length, truncated data, a forward pointer.
  EXPECT_FALSE(parse_dns_response(
      response(9, 0x8180, {rr(u16(0xc00c), dns_type::kA, 1, "abc")}, name({"a", "example"})), 9,
      "a.example", dns_type::kA));
  EXPECT_FALSE(parse_dns_response(ok.substr(0, ok.size() - 2), 9, "a.example", dns_type::kA));
  EXPECT_FALSE(parse_dns_response(
      response(9, 0x8180, {rr(u16(0xc0ff), dns_type::kA, 1, v4)}, name({"a", "example"})), 9,
      "a.example", dns_type::kA));
}

TEST(DnsResolver, TruncationNxdomainAndCnameLoops) {
  std::string qn = name({"a", "example"});
  auto tc = parse_dns_response(response(3, 0x8380, {}, qn), 3, "a.example", dns_type::kA);
  ASSERT_TRUE(tc);
  EXPECT_TRUE(tc->truncated);
  auto nx = parse_dns_response(response(3, 0x8183, {}, qn), 3, "a.example", dns_type::kA);
  ASSERT_TRUE(nx);
  EXPECT_EQ(nx->rcode, DnsRcode::kNxDomain);
  EXPECT_TRUE(nx->addresses.empty());
  // a → b → a: the loop ends, nothing is answered.
  std::string b = name({"b", "example"});
  auto loop = parse_dns_response(
      response(3, 0x8180,
               {rr(u16(0xc00c), dns_type::kCname, 1, b), rr(b, dns_type::kCname, 1, u16(0xc00c))},
               qn),
      3, "a.example", dns_type::kA);
  ASSERT_TRUE(loop) << loop.error().message;
  EXPECT_TRUE(loop->addresses.empty());
}

}  // namespace
}  // namespace cordon::gateway
