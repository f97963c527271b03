// libFuzzer driver for BodySecretScrubber and ScrubbingBodyRelay. Input: byte 0 seeds where the
// body is split into feed() calls, byte 1 picks a second secret taken from the input (length
// 4-27) besides a fixed one; the rest is the body. Checks the stages' promises, not only the
// absence of crashes:
//  - the scrubbed body has the input's length (same-length replacement), whatever the split,
//    and is the same for every split;
//  - no secret (without '*') is left in it raw or as hex;
//  - the hold-back never exceeds max_hold();
//  - the relay decoding the body as gzip/deflate ends cleanly or fails, its steps bounded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/stages/body_relay.h"
#include "gateway/stages/body_scrubber.h"

using namespace cordon::gateway;

namespace {

const std::string kSecret = "S3CRET/value+for=fuzzing";

std::string hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::string scrub(const std::vector<std::string>& secrets, std::string_view body, unsigned seed) {
  BodySecretScrubber s(secrets);
  std::string out;
  size_t pos = 0;
  unsigned x = seed * 2654435761u + 1;
  while (pos < body.size()) {
    x = x * 1103515245u + 12345u;
    size_t step = seed == 0 ? body.size() : 1 + (x >> 16) % 97;
    step = std::min(step, body.size() - pos);
    s.feed(body.substr(pos, step), out);
    if (s.held() > s.max_hold()) std::abort();
    pos += step;
  }
  s.finish(out);
  if (s.held() != 0) std::abort();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 64 * 1024) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  unsigned seed = uint8_t(in[0]);
  unsigned pick = uint8_t(in[1]);
  in.remove_prefix(2);
  std::vector<std::string> secrets = {kSecret};
  if ((pick & 1) && !in.empty()) {
    size_t len = std::min<size_t>(4 + (pick >> 1) % 24, in.size());
    secrets.emplace_back(in.substr(0, len));
  }

  std::string whole = scrub(secrets, in, 0);
  std::string split = scrub(secrets, in, seed | 1);
  if (whole.size() != in.size() || split != whole) std::abort();
  for (const auto& s : secrets) {
    if (s.size() < kMinScrubSecretBytes || s.find('*') != std::string::npos) continue;
    if (whole.find(s) != std::string::npos) std::abort();
    if (s.size() * 2 >= kMinScrubPatternBytes && whole.find(hex(s)) != std::string::npos &&
        hex(s).find('*') == std::string::npos)
      std::abort();
  }

  // The body as a compressed stream (mostly invalid: exercises the decoder's error paths).
  for (BodyCoding coding : {BodyCoding::kGzip, BodyCoding::kDeflate}) {
    ScrubbingBodyRelay relay(secrets, coding, (pick & 2) != 0);
    std::string out;
    relay.feed(in.substr(0, in.size() / 2), out);
    while (relay.drain(out, 4096)) {
      if (out.size() > 256 * 1024) std::abort();  // one step at a time, never the whole
      out.clear();
    }
    relay.feed(in.substr(in.size() / 2), out);
    while (relay.drain(out, 4096)) out.clear();
    (void)relay.finish({}, {}, secrets, out);
  }
  return 0;
}
