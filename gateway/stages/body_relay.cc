#include "gateway/stages/body_relay.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "gateway/stages/credential_injector.h"

namespace cordon::gateway {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Trailers never carry framing, routing or credentials (as the parser's own re-chunking).
bool dropped_trailer(std::string_view name, const std::vector<std::string>& dropped) {
  static constexpr std::string_view kDropped[] = {
      "content-length", "transfer-encoding",   "host", "authorization", "cookie",
      "connection",     "proxy-authorization", "te",   "trailer",       "upgrade",
      "set-cookie",     "content-encoding"};
  for (auto d : kDropped)
    if (ascii_iequals(name, d)) return true;
  for (const auto& d : dropped)
    if (ascii_iequals(name, d)) return true;
  return false;
}

}  // namespace

BodyCoding body_coding(const HeaderList& headers) {
  BodyCoding found = BodyCoding::kIdentity;
  int codings = 0;
  for (const auto& h : headers) {
    if (!ascii_iequals(h.name, "content-encoding")) continue;
    std::string_view rest = h.value;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view item = trim(rest.substr(0, comma));
      if (!item.empty() && !ascii_iequals(item, "identity")) {
        ++codings;
        if (ascii_iequals(item, "gzip") || ascii_iequals(item, "x-gzip")) {
          found = BodyCoding::kGzip;
        } else if (ascii_iequals(item, "deflate")) {
          found = BodyCoding::kDeflate;
        } else {
          return BodyCoding::kUnsupported;
        }
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return codings > 1 ? BodyCoding::kUnsupported : found;
}

void narrow_accept_encoding(HeaderList& headers) {
  std::erase_if(headers, [](const Header& h) { return ascii_iequals(h.name, "accept-encoding"); });
  headers.push_back(Header{"Accept-Encoding", "identity"});
}

void remember_secrets(std::vector<std::string>& known, const std::vector<std::string>& more) {
  for (const auto& s : more) {
    if (known.size() >= kMaxScrubSecrets) return;
    if (!s.empty() && std::find(known.begin(), known.end(), s) == known.end()) known.push_back(s);
  }
}

struct ScrubbingBodyRelay::Inflater {
  z_stream zs{};
  bool open = false;
  bool raw_tried = false;   // deflate: retried as raw deflate (no zlib header)
  bool stream_end = false;  // the last member ended
  bool produced = false;
  int window_bits = 0;

  explicit Inflater(BodyCoding coding) {
    // gzip: 15 + 16 (gzip wrapper); deflate: 15 (zlib wrapper), falling back to raw.
    window_bits = coding == BodyCoding::kGzip ? 15 + 16 : 15;
    open = inflateInit2(&zs, window_bits) == Z_OK;
  }
  ~Inflater() {
    if (open) inflateEnd(&zs);
  }
  bool restart_raw() {
    if (open) inflateEnd(&zs);
    zs = z_stream{};
    raw_tried = true;
    window_bits = -15;
    open = inflateInit2(&zs, window_bits) == Z_OK;
    return open;
  }
};

ScrubbingBodyRelay::ScrubbingBodyRelay(const std::vector<std::string>& secrets, BodyCoding coding,
                                       bool chunked_out)
    : ScrubbingBodyRelay(std::make_shared<const ScrubPatterns>(secrets), coding, chunked_out) {}

ScrubbingBodyRelay::ScrubbingBodyRelay(std::shared_ptr<const ScrubPatterns> patterns,
                                       BodyCoding coding, bool chunked_out)
    : scrubber_(std::move(patterns)), coding_(coding), chunked_out_(chunked_out) {
  if (coding_ == BodyCoding::kUnsupported) {
    error_ = "unscannable_content_encoding";
  } else if (coding_ != BodyCoding::kIdentity) {
    inflater_ = std::make_unique<Inflater>(coding_);
    if (!inflater_->open) error_ = "decoder_unavailable";
  }
}

ScrubbingBodyRelay::~ScrubbingBodyRelay() = default;

void ScrubbingBodyRelay::emit(std::string_view plain, std::string& out) {
  if (!chunked_out_) {
    scrubber_.feed(plain, out);
    return;
  }
  scrubbed_.clear();
  scrubber_.feed(plain, scrubbed_);
  if (scrubbed_.empty()) return;
  char line[24];
  int n = std::snprintf(line, sizeof line, "%zx\r\n", scrubbed_.size());
  out.append(line, static_cast<size_t>(n)).append(scrubbed_).append("\r\n");
}

void ScrubbingBodyRelay::feed(std::string_view raw, std::string& out) {
  if (failed() || raw.empty()) return;
  if (coding_ == BodyCoding::kIdentity) {
    emit(raw, out);
    return;
  }
  // Kept from the start until a deflate body produced output (it may be retried as raw).
  bool retry_possible = coding_ == BodyCoding::kDeflate && !inflater_->produced;
  if (pending_pos_ == pending_.size() && !retry_possible) {
    pending_.clear();
    pending_pos_ = 0;
  }
  pending_.append(raw);
  // Kept whole until output comes: input that decodes to nothing (empty stored blocks) would
  // otherwise grow it without bound. Any real deflate body produces output well before this.
  constexpr size_t kMaxSilentDeflateBytes = 256 * 1024;
  if (retry_possible && pending_.size() > kMaxSilentDeflateBytes)
    error_ = "compressed_body_invalid";
}

bool ScrubbingBodyRelay::drain(std::string& out, size_t budget) {
  if (failed() || !inflater_) return false;
  Inflater& z = *inflater_;
  size_t decoded = 0;
  constexpr size_t kStep = 16 * 1024;
  while (pending_pos_ < pending_.size() && decoded < budget) {
    if (z.stream_end) {
      // Another gzip member (concatenated); anything else after the end is an error.
      if (coding_ != BodyCoding::kGzip || inflateReset(&z.zs) != Z_OK) {
        error_ = "compressed_body_trailing_data";
        return false;
      }
      z.stream_end = false;
    }
    plain_.resize(kStep);
    z.zs.next_in = reinterpret_cast<Bytef*>(pending_.data() + pending_pos_);
    z.zs.avail_in = static_cast<uInt>(pending_.size() - pending_pos_);
    z.zs.next_out = reinterpret_cast<Bytef*>(plain_.data());
    z.zs.avail_out = static_cast<uInt>(plain_.size());
    int r = inflate(&z.zs, Z_NO_FLUSH);
    size_t used = (pending_.size() - pending_pos_) - z.zs.avail_in;
    size_t made = plain_.size() - z.zs.avail_out;
    if (r == Z_DATA_ERROR && coding_ == BodyCoding::kDeflate && !z.raw_tried && !z.produced) {
      // "deflate" sent as raw deflate (a common server mistake): retry from the start.
      if (!z.restart_raw()) {
        error_ = "decoder_unavailable";
        return false;
      }
      pending_pos_ = 0;
      continue;
    }
    if (r != Z_OK && r != Z_STREAM_END && !(r == Z_BUF_ERROR && made == 0 && used == 0)) {
      error_ = "compressed_body_invalid";
      return false;
    }
    pending_pos_ += used;
    if (made > 0) {
      z.produced = true;
      decoded += made;
      decoded_bytes_ += made;
      emit(std::string_view(plain_.data(), made), out);
    }
    if (r == Z_STREAM_END) z.stream_end = true;
    if (used == 0 && made == 0) break;  // needs more input
  }
  return pending_pos_ < pending_.size();
}

bool ScrubbingBodyRelay::finish(const HeaderList& trailers, const std::vector<std::string>& dropped,
                                const std::vector<std::string>& secrets, std::string& out) {
  if (failed()) return false;
  if (inflater_) {
    // The caller drained already (bounded steps); what is left is at most one step's input.
    if (pending_pos_ < pending_.size() && drain(out, static_cast<size_t>(-1))) {
      error_ = "compressed_body_invalid";
      return false;
    }
    if (failed()) return false;
    if (!inflater_->stream_end) {
      error_ = "compressed_body_truncated";
      return false;
    }
  }
  if (!chunked_out_) {
    scrubber_.finish(out);
    return true;
  }
  scrubbed_.clear();
  scrubber_.finish(scrubbed_);
  if (!scrubbed_.empty()) {
    char line[24];
    int n = std::snprintf(line, sizeof line, "%zx\r\n", scrubbed_.size());
    out.append(line, static_cast<size_t>(n)).append(scrubbed_).append("\r\n");
  }
  out.append("0\r\n");
  ResponseScrubber leaks(secrets);
  for (const auto& t : trailers) {
    if (dropped_trailer(t.name, dropped) || leaks.leak_form(t)) continue;
    out.append(t.name).append(": ").append(t.value).append("\r\n");
  }
  out.append("\r\n");
  return true;
}

}  // namespace cordon::gateway
