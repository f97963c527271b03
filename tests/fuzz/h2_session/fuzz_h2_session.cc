// Drives H2ServerSession with arbitrary client bytes, the way the gateway's connection loop
// does: feed, drain events, translate every accepted request to HTTP/1.1, answer some streams
// (body and trailers), consume request bodies, produce output, forget closed streams.
// Input: byte 0 = flags (bit 0: prepend the client preface; bits 1-3: feed chunk size class;
// bit 4: drive the client session toward an upstream instead, H2ClientSession, with three
// requests open: then the rest is the upstream's byte stream), the rest is the client's byte
// stream. Invariants checked with __builtin_trap().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gateway/h2/client_session.h"
#include "gateway/h2/server_session.h"
#include "gateway/h2/translate.h"

using namespace cordon::gateway;
using namespace cordon::gateway::h2;

namespace {

void check_http1(const detail::MessageHead& m) {
  if (m.headers.empty() || m.headers[0].name != "host") __builtin_trap();
  for (const auto& h : m.headers) {
    for (char c : h.name) {
      if (c == '\r' || c == '\n' || c == ':' || c == '\0') __builtin_trap();
    }
    for (char c : h.value) {
      if (c == '\r' || c == '\n' || c == '\0') __builtin_trap();
    }
  }
  for (char c : m.target) {
    if (c == '\r' || c == '\n' || c == ' ' || c == '\0') __builtin_trap();
  }
  if (m.chunked && m.content_length) __builtin_trap();
}

void drain(H2ServerSession& s, uint64_t now) {
  for (size_t round = 0; round < 4; ++round) {
    auto events = std::move(s.events());
    s.events().clear();
    if (events.empty()) break;
    for (const H2Event& e : events) {
      H2Stream* st = s.stream(e.stream);
      if (!st) continue;
      switch (e.kind) {
        case H2EventKind::kRequest: {
          check_http1(to_http1_request(st->head));
          if (st->head.path.size() % 3 == 0) {
            s.respond(st->id, 200, {{"content-type", "text/plain"}}, false);
            s.send_data(st->id, "body");
          }
          break;
        }
        case H2EventKind::kRejected:
          if (st->refusal == HeaderRefusal::kRespond)
            s.respond(st->id, st->reject_status, {}, true);
          break;
        case H2EventKind::kData:
          s.consume(st->id, st->body_in.size());
          st->body_in.clear();
          break;
        case H2EventKind::kEnd:
          if (st->responded) {
            s.finish_response(st->id, {{"grpc-status", "0"}});
          } else if (!st->rejected) {
            s.respond(st->id, 204, {}, true);
          }
          break;
        case H2EventKind::kDrained:
          break;
        case H2EventKind::kClosed:
          s.forget(st->id);
          break;
      }
    }
    std::string out;
    s.produce(out, 1 << 20);
  }
  (void)now;
}

// The upstream side: what an untrusted h2 server can make the client session hold or emit.
void drain_upstream(H2ClientSession& s, const H2Limits& limits) {
  auto events = std::move(s.events());
  s.events().clear();
  for (const H2UpstreamEvent& e : events) {
    H2UpstreamStream* st = s.stream(e.stream);
    if (!st) continue;
    // nghttp2 enforces our windows: never more unconsumed bytes than one stream window.
    if (st->received - st->consumed > limits.stream_response_buffer_bytes) __builtin_trap();
    switch (e.kind) {
      case H2UpstreamEventKind::kHead: {
        detail::MessageHead m;
        m.status = st->status;
        m.headers = st->headers;
        H2ResponseHead rh = to_h2_response(m, {"s3cret"});
        for (const auto& h : rh.headers) {
          if (h.name.empty() || h.name[0] == ':' || h.value.find("s3cret") != std::string::npos)
            __builtin_trap();
        }
        break;
      }
      case H2UpstreamEventKind::kData:
        s.consume(st->id, st->body_in.size());
        st->body_in.clear();
        break;
      case H2UpstreamEventKind::kEnd:
        for (const auto& h : to_h2_trailers(st->trailers, {"s3cret"})) {
          if (h.value.find("s3cret") != std::string::npos) __builtin_trap();
        }
        break;
      case H2UpstreamEventKind::kSent:
        st->sent_reported = st->sent;
        break;
      case H2UpstreamEventKind::kClosed:
        s.forget(st->id);
        break;
    }
  }
  std::string out;
  s.produce(out, 1 << 20);
}

int fuzz_upstream(const uint8_t* data, size_t size, size_t chunk) {
  H2Limits limits;
  limits.max_header_list_bytes = 4096;
  limits.max_header_count = 32;
  const H2Limits clamped = limits.clamped();
  H2ClientSession s(limits);
  s.submit("GET", "api.test", "/a", {{"x-api-key", "s3cret", true}}, true);
  int32_t post =
      s.submit("POST", "api.test", "/svc/Echo", {{"content-type", "application/grpc"}}, false);
  s.submit("GET", "api.test", "/b", {}, true);
  s.send_data(post, std::string(70000, 'p'));
  s.finish_request(post, {{"x-t", "1"}});
  std::string out;
  s.produce(out, 1 << 20);
  size_t pos = 0;
  while (pos < size) {
    size_t n = std::min(chunk, size - pos);
    bool more = s.receive(data + pos, n);
    pos += n;
    drain_upstream(s, clamped);
    if (!more) break;
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  ++data;
  --size;
  static const size_t kChunkSizes[] = {1, 7, 64, 512, 4096, 1 << 16, 3, 13};
  if (flags & 0x10) return fuzz_upstream(data, size, kChunkSizes[(flags >> 1) & 7]);
  H2Limits limits;
  limits.max_header_list_bytes = 4096;
  limits.max_header_count = 32;
  limits.max_concurrent_streams = 8;
  H2ServerSession s(limits);
  uint64_t now = 0;
  if (flags & 1) {
    static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    s.receive(reinterpret_cast<const uint8_t*>(kPreface), sizeof kPreface - 1, now);
  }
  static const size_t kChunks[] = {1, 7, 64, 512, 4096, 1 << 16, 3, 13};
  size_t chunk = kChunks[(flags >> 1) & 7];
  size_t pos = 0;
  while (pos < size) {
    size_t n = std::min(chunk, size - pos);
    bool more = s.receive(data + pos, n, now);
    pos += n;
    now += 3;
    drain(s, now);
    if (!more) break;
  }
  std::string out;
  s.produce(out, 1 << 20);
  if (s.buffered_out_total() > (64u << 20)) __builtin_trap();
  return 0;
}
