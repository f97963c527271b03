// Response side, bodies (specs/egress-threats.md item 23): an upstream that reflects the
// request (a debugging endpoint echoing headers) would hand the injected credential back to the
// sandbox. BodySecretScrubber overwrites every occurrence of a known secret value in a response
// body stream, in its usual encodings:
//   raw; base64 (standard and url-safe alphabets, at each of the three byte alignments the
//   secret can have inside a longer encoded text: the characters that depend on the secret's
//   bytes only); percent-encoding of every byte outside RFC 3986 "unreserved" (upper- and
//   lower-case hex); JSON string escaping (\" \\ \uXXXX for controls, with and without "\/",
//   and the HTML-safe \u003c \u003e \u0026 \u0027 form); hex (lower and upper case).
// Each match is replaced in place by the same number of '*' bytes: the body keeps its length,
// so a Content-Length stays true and no framing changes.
//
// Streaming: bytes that could still be the start of a match (a suffix of the input that is a
// proper prefix of some pattern) are held back until more input or finish(); everything else
// is returned at once. The hold-back is at most (longest pattern - 1) bytes, so memory is
// bounded whatever the body's size. A match split over any number of feed() calls is found.
//
// Trust: the body is untrusted (any bytes, any split). The secrets are the gateway's own.
// Patterns shorter than kMinScrubPatternBytes are not searched (a 2-byte "secret" would blank
// random text); a raw secret shorter than that is still searched raw when it is at least
// kMinScrubSecretBytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cordon::gateway {

// Hard bounds of the scrubber: what it accepts from its caller.
inline constexpr size_t kMinScrubSecretBytes = 4;     // shorter secrets are ignored
inline constexpr size_t kMinScrubPatternBytes = 6;    // shorter encoded forms are not searched
inline constexpr size_t kMaxScrubSecrets = 64;        // more are ignored (a request has 1-2)
inline constexpr size_t kMaxScrubSecretBytes = 8192;  // longer secrets are ignored

// Which encodings a match was found in (bits of BodySecretScrubber::forms()).
enum ScrubForm : uint32_t {
  kScrubRaw = 1u << 0,
  kScrubBase64 = 1u << 1,
  kScrubBase64Url = 1u << 2,
  kScrubPercent = 1u << 3,
  kScrubJson = 1u << 4,
  kScrubHex = 1u << 5,
};
// "raw,base64" for a forms() mask ("" for 0).
std::string scrub_forms_text(uint32_t forms);

// What a scrubber searches for: every form of the secrets and the index over them. Immutable
// once built, so one copy serves every response of a connection (building it costs more than
// scanning a small response).
class ScrubPatterns {
 public:
  // Secrets outside [kMinScrubSecretBytes, kMaxScrubSecretBytes], and past kMaxScrubSecrets,
  // are ignored. Duplicates are merged.
  explicit ScrubPatterns(const std::vector<std::string>& secrets);
  bool empty() const { return patterns_.empty(); }
  size_t size() const { return patterns_.size(); }

 private:
  friend class BodySecretScrubber;
  struct Pattern {
    std::string bytes;
    uint32_t form = 0;
  };
  void add(std::string bytes, uint32_t form);
  void build_index();
  uint64_t window_key(const char* p) const;

  std::vector<Pattern> patterns_;
  // Index: `window_`-byte windows of every pattern (at offsets 0..stride_-1), hashed into a
  // bitmap (a cheap "maybe" per sampled position), then sorted by window for the exact check.
  size_t window_ = 0, stride_ = 1;
  size_t min_len_ = 0, max_len_ = 0;
  uint64_t window_mask_ = 0;
  unsigned hash_bits_ = 16;
  std::vector<uint64_t> bitmap_;
  struct Entry {
    uint64_t key;
    uint32_t pattern;
    uint32_t offset;  // of the window in the pattern
  };
  std::vector<Entry> entries_;  // sorted by key
  // The longest pattern that starts with each byte: the hold-back check at the end of every
  // feed skips the tail positions whose byte starts no pattern long enough.
  std::array<uint32_t, 256> longest_from_{};
};

// The patterns of one connection's secrets, built again only when those secrets change (a
// connection injects the same one or two secrets into every request).
class ScrubPatternCache {
 public:
  std::shared_ptr<const ScrubPatterns> get(const std::vector<std::string>& secrets);

 private:
  std::vector<std::string> secrets_;
  std::shared_ptr<const ScrubPatterns> patterns_;
};

class BodySecretScrubber {
 public:
  // Builds the patterns of `secrets` (see ScrubPatterns), or shares patterns built before.
  explicit BodySecretScrubber(const std::vector<std::string>& secrets);
  explicit BodySecretScrubber(std::shared_ptr<const ScrubPatterns> patterns);

  // False when there is nothing to search for: feed() then copies.
  bool active() const { return !p_->empty(); }
  // Scrubs `in` (following everything fed before) and appends to `out` every byte that can no
  // longer be part of a match.
  void feed(std::string_view in, std::string& out);
  // End of the body: appends the held-back bytes (scrubbed).
  void finish(std::string& out);

  // Matches replaced so far, and the encodings they were in (ScrubForm bits).
  uint64_t matches() const { return matches_; }
  uint32_t forms() const { return forms_; }
  // Bytes held back right now, and the most it can ever hold (longest pattern - 1).
  size_t held() const { return carry_.size(); }
  size_t max_hold() const { return p_->max_len_ == 0 ? 0 : p_->max_len_ - 1; }
  size_t pattern_count() const { return p_->size(); }

 private:
  // Finds the matches starting in buf before the held-back tail and blanks them (up to that
  // tail); returns the tail's length (0 when `final`).
  size_t scan(char* buf, size_t len, bool final);
  size_t hold_length(const char* buf, size_t len) const;

  std::shared_ptr<const ScrubPatterns> p_;
  std::vector<std::pair<size_t, size_t>> spans_;  // matches of one scan (reused)
  std::string carry_;
  size_t blank_pending_ = 0;  // bytes at the start of carry_ already known to be in a match
  uint64_t matches_ = 0;
  uint32_t forms_ = 0;
};

}  // namespace cordon::gateway
