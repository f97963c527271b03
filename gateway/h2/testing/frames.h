// Test-only: hand-made HTTP/2 frames (RFC 9113 §4, §6) and a reader for what a server sent,
// for the unit tests, the fuzzer's seed corpus and the flood end-to-end tests, which need
// frames no well-behaved client library would send. Never linked into the gateway.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cordon::gateway::h2::testing {

using Fields = std::vector<std::pair<std::string, std::string>>;

enum FrameType : uint8_t {
  kData = 0,
  kHeaders = 1,
  kPriority = 2,
  kRstStream = 3,
  kSettings = 4,
  kPushPromise = 5,
  kPing = 6,
  kGoaway = 7,
  kWindowUpdate = 8,
  kContinuation = 9,
};
inline constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4;

std::string frame(uint8_t type, uint8_t flags, int32_t stream, std::string_view payload);
// The client connection preface: magic, then an empty SETTINGS frame.
std::string preface();
// HPACK, with a deflater that persists across calls (one per connection, as on the wire).
class Encoder {
 public:
  Encoder();
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;
  std::string block(const Fields& fields);
  std::string headers(int32_t stream, const Fields& fields, bool end_stream);

 private:
  void* deflater_ = nullptr;
};
std::string data(int32_t stream, std::string_view bytes, bool end_stream);
std::string rst_stream(int32_t stream, uint32_t code);
std::string settings_ack();
std::string ping(bool ack = false);
std::string window_update(int32_t stream, uint32_t increment);
std::string priority(int32_t stream, int32_t depends_on);
// The usual request fields for https://authority/path.
Fields request(const std::string& method, const std::string& authority, const std::string& path);

struct Frame {
  uint8_t type = 0;
  uint8_t flags = 0;
  int32_t stream = 0;
  std::string payload;
};
// Splits `bytes` into frames (an incomplete tail is left in `bytes`).
std::vector<Frame> read_frames(std::string& bytes);
// Decodes a server's HEADERS payloads in order (one inflater per connection).
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  Fields decode(const Frame& headers_frame);

 private:
  void* inflater_ = nullptr;
};
uint32_t goaway_code(const Frame& f);
uint32_t rst_code(const Frame& f);

}  // namespace cordon::gateway::h2::testing
