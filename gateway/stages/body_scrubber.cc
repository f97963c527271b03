#include "gateway/stages/body_scrubber.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

namespace cordon::gateway {

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr size_t kBitmapBits = 1u << 16;

std::string base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v =
        (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kB64[(v >> s) & 63]);
  }
  // The tail is never used (only characters made of the secret's bits are kept).
  return out;
}

// The base64 characters that depend only on the secret's bytes when `align` bytes (0-2) of
// other text precede it in its 3-byte group: character i covers bits [6i, 6i + 6) of the
// stream, the secret bits [8 * align, 8 * (align + n)).
std::string base64_core(std::string_view secret, size_t align) {
  std::string padded(align, '\0');
  padded.append(secret);
  padded.append(3, '\0');
  padded.resize(padded.size() / 3 * 3);
  std::string enc = base64(padded);
  size_t first = (8 * align + 5) / 6;
  size_t last = 8 * (align + secret.size()) / 6;
  if (last <= first || last > enc.size()) return {};
  return enc.substr(first, last - first);
}

std::string to_url_safe(std::string s) {
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string percent(std::string_view s, bool upper) {
  const char* hex = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (unreserved(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string hex(std::string_view s, bool upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// JSON string escaping as encoders write it: `slash` adds "\/" (PHP, some Java), `html` the
// \u003c-style escapes of < > & ' (Go's encoding/json).
std::string json(std::string_view s, bool slash, bool html) {
  std::string out;
  for (unsigned char c : s) {
    char u[8];
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '/' && slash) {
      out += "\\/";
    } else if (c < 0x20 || (html && (c == '<' || c == '>' || c == '&' || c == '\''))) {
      std::snprintf(u, sizeof u, "\\u%04x", c);
      out += u;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace

std::string scrub_forms_text(uint32_t forms) {
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {kScrubRaw, "raw"},         {kScrubBase64, "base64"}, {kScrubBase64Url, "base64url"},
      {kScrubPercent, "percent"}, {kScrubJson, "json"},     {kScrubHex, "hex"},
  };
  std::string out;
  for (auto [bit, name] : kNames) {
    if (!(forms & bit)) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

ScrubPatterns::ScrubPatterns(const std::vector<std::string>& secrets) {
  size_t taken = 0;
  for (const auto& s : secrets) {
    if (s.size() < kMinScrubSecretBytes || s.size() > kMaxScrubSecretBytes) continue;
    if (++taken > kMaxScrubSecrets) break;
    add(s, kScrubRaw);
    for (size_t a = 0; a < 3; ++a) {
      std::string core = base64_core(s, a);
      std::string url = to_url_safe(core);
      add(std::move(core), kScrubBase64);  // first: the same text is reported as base64
      add(std::move(url), kScrubBase64Url);
    }
    add(percent(s, true), kScrubPercent);
    add(percent(s, false), kScrubPercent);
    add(json(s, false, false), kScrubJson);
    add(json(s, true, false), kScrubJson);
    add(json(s, false, true), kScrubJson);
    add(json(s, true, true), kScrubJson);
    add(hex(s, false), kScrubHex);
    add(hex(s, true), kScrubHex);
  }
  build_index();
}

std::shared_ptr<const ScrubPatterns> ScrubPatternCache::get(
    const std::vector<std::string>& secrets) {
  if (!patterns_ || secrets != secrets_) {
    patterns_ = std::make_shared<const ScrubPatterns>(secrets);
    secrets_ = secrets;
  }
  return patterns_;
}

BodySecretScrubber::BodySecretScrubber(const std::vector<std::string>& secrets)
    : p_(std::make_shared<const ScrubPatterns>(secrets)) {}

BodySecretScrubber::BodySecretScrubber(std::shared_ptr<const ScrubPatterns> patterns)
    : p_(patterns ? std::move(patterns)
                  : std::make_shared<const ScrubPatterns>(std::vector<std::string>{})) {}

void ScrubPatterns::add(std::string bytes, uint32_t form) {
  // A raw secret is searched from kMinScrubSecretBytes on; encoded forms (which are longer
  // than the secret, except the base64 cores) from kMinScrubPatternBytes.
  size_t min = form == kScrubRaw ? kMinScrubSecretBytes : kMinScrubPatternBytes;
  if (bytes.size() < min) return;
  for (const auto& p : patterns_)
    if (p.bytes == bytes) return;  // the first form found is the one reported
  patterns_.push_back(Pattern{std::move(bytes), form});
}

uint64_t ScrubPatterns::window_key(const char* p) const {
  uint64_t k = 0;
  std::memcpy(&k, p, window_);
  return k;
}

void ScrubPatterns::build_index() {
  if (patterns_.empty()) return;
  min_len_ = max_len_ = patterns_[0].bytes.size();
  for (const auto& p : patterns_) {
    min_len_ = std::min(min_len_, p.bytes.size());
    max_len_ = std::max(max_len_, p.bytes.size());
  }
  for (const auto& p : patterns_) {
    uint32_t& longest = longest_from_[static_cast<unsigned char>(p.bytes[0])];
    longest = std::max(longest, static_cast<uint32_t>(p.bytes.size()));
  }
  window_ = std::min<size_t>(8, min_len_);
  window_mask_ = window_ == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * window_)) - 1;
  // Sampling: a window is looked up only every `stride_` bytes. Every occurrence of a pattern
  // (at least min_len_ long) then holds one sampled window whole, at an offset below stride_
  // from its start, so each pattern is indexed at every offset in [0, stride_).
  stride_ = std::min<size_t>(min_len_ - window_ + 1, 64);
  for (uint32_t i = 0; i < patterns_.size(); ++i)
    for (uint32_t k = 0; k < stride_; ++k)
      entries_.push_back(Entry{window_key(patterns_[i].bytes.data() + k), i, k});
  // About 16 bits per entry keeps false hits near 6%, within 2^16..2^22 bits.
  hash_bits_ = 16;
  while (hash_bits_ < 22 && (size_t{1} << hash_bits_) < 16 * entries_.size()) ++hash_bits_;
  bitmap_.assign((size_t{1} << hash_bits_) / 64, 0);
  for (const auto& e : entries_) {
    uint64_t h = (e.key * 0x9E3779B97F4A7C15ull) >> (64 - hash_bits_);
    bitmap_[h >> 6] |= uint64_t{1} << (h & 63);
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.key < b.key; });
}

size_t BodySecretScrubber::hold_length(const char* buf, size_t len) const {
  size_t k = std::min(len, p_->max_len_ - 1);
  for (; k > 0; --k) {
    const char* tail = buf + len - k;
    if (p_->longest_from_[static_cast<unsigned char>(tail[0])] <= k) continue;
    for (const auto& p : p_->patterns_) {
      if (p.bytes.size() > k && p.bytes[0] == tail[0] && std::memcmp(p.bytes.data(), tail, k) == 0)
        return k;
    }
  }
  return 0;
}

size_t BodySecretScrubber::scan(char* buf, size_t len, bool final) {
  size_t hold = final ? 0 : hold_length(buf, len);
  size_t scan_end = len - hold;  // match starts in [0, scan_end) are decided now
  // Matches are collected on the original bytes first and blanked afterwards, so that
  // overlapping occurrences are all found. The carry's leading bytes that a match of the
  // previous call covered are one more interval.
  spans_.clear();
  if (blank_pending_ > 0) spans_.push_back({0, blank_pending_});
  constexpr bool kLittle = std::endian::native == std::endian::little;
  const ScrubPatterns& x = *p_;
  for (size_t j = 0; j + x.window_ <= len; j += x.stride_) {
    uint64_t key;
    if (kLittle && j + 8 <= len) {
      std::memcpy(&key, buf + j, 8);
      key &= x.window_mask_;
    } else {
      key = x.window_key(buf + j);
    }
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> (64 - x.hash_bits_);
    if (!(x.bitmap_[h >> 6] & (uint64_t{1} << (h & 63)))) continue;
    auto it = std::lower_bound(x.entries_.begin(), x.entries_.end(), key,
                               [](const ScrubPatterns::Entry& e, uint64_t k) { return e.key < k; });
    for (; it != x.entries_.end() && it->key == key; ++it) {
      if (it->offset > j) continue;
      size_t i = j - it->offset;
      const ScrubPatterns::Pattern& p = x.patterns_[it->pattern];
      // A start in the held tail is decided by a later call (it is then in the carry).
      if (i >= scan_end || i + p.bytes.size() > len) continue;
      if (std::memcmp(buf + i, p.bytes.data(), p.bytes.size()) != 0) continue;
      spans_.push_back({i, i + p.bytes.size()});
      ++matches_;
      forms_ |= p.form;
    }
  }
  std::sort(spans_.begin(), spans_.end());
  size_t blank_to = 0;
  for (auto [from, to] : spans_) {
    size_t lo = std::max(from, blank_to), hi = std::min(to, scan_end);
    if (lo < hi) std::memset(buf + lo, '*', hi - lo);
    blank_to = std::max(blank_to, to);
  }
  // Blanked when emitted by the next call: the held bytes stay original for its matching.
  blank_pending_ = blank_to > scan_end ? blank_to - scan_end : 0;
  return hold;
}

void BodySecretScrubber::feed(std::string_view in, std::string& out) {
  if (!active()) {
    out.append(in);
    return;
  }
  size_t base = out.size();
  out.append(carry_);
  out.append(in);
  size_t hold = scan(out.data() + base, out.size() - base, false);
  carry_.assign(out.data() + out.size() - hold, hold);
  out.resize(out.size() - hold);
}

void BodySecretScrubber::finish(std::string& out) {
  if (carry_.empty()) return;
  scan(carry_.data(), carry_.size(), true);
  out.append(carry_);
  carry_.clear();
  blank_pending_ = 0;
}

}  // namespace cordon::gateway
