#include "gateway/h2/scrubbed_body.h"

#include <algorithm>
#include <utility>

namespace cordon::gateway::h2 {

bool enveloped_body(const HeaderList& headers) {
  for (const auto& h : headers) {
    if (!ascii_iequals(h.name, "content-type")) continue;
    std::string_view v = h.value;
    auto starts = [&](std::string_view p) {
      return v.size() >= p.size() && ascii_iequals(v.substr(0, p.size()), p);
    };
    return starts("application/grpc") || starts("application/connect+");
  }
  return false;
}

size_t ScrubbedBody::EnvelopeCursor::next_cut(std::string_view in, bool& at_end) {
  size_t pos = 0;
  at_end = false;
  while (pos < in.size()) {
    if (header_have < sizeof header) {
      header[header_have++] = static_cast<uint8_t>(in[pos++]);
      if (header_have < sizeof header) continue;
      body_left = uint64_t{header[1]} << 24 | uint64_t{header[2]} << 16 | uint64_t{header[3]} << 8 |
                  header[4];
    } else {
      size_t take = static_cast<size_t>(std::min<uint64_t>(body_left, in.size() - pos));
      pos += take;
      body_left -= take;
    }
    if (body_left == 0) {
      header_have = 0;
      at_end = true;
      return pos;
    }
  }
  return pos;
}

ScrubbedBody::ScrubbedBody(std::shared_ptr<const ScrubPatterns> patterns, HeaderList& headers)
    : relay_(std::move(patterns), body_coding(headers), /*chunked_out=*/false) {
  if (relay_.failed()) return;
  if (relay_.decoded_head_changes()) {
    std::erase_if(headers, [](const Header& h) {
      return ascii_iequals(h.name, "content-encoding") || ascii_iequals(h.name, "content-length");
    });
  } else {
    // Messages inside a compressed body are never seen: the envelopes only cut identity ones.
    envelopes_.on = enveloped_body(headers);
  }
}

void ScrubbedBody::feed(std::string_view raw, std::string& out) {
  while (envelopes_.on && !raw.empty()) {
    bool at_end = false;
    size_t cut = envelopes_.next_cut(raw, at_end);
    relay_.feed(raw.substr(0, cut), out);
    raw.remove_prefix(cut);
    if (at_end) relay_.finish({}, {}, {}, out);  // identity: releases the hold-back
  }
  relay_.feed(raw, out);
}

bool ScrubbedBody::drain(std::string& out, size_t budget) {
  return relay_.drain(out, budget);
}

bool ScrubbedBody::finish(std::string& out) {
  return relay_.finish({}, {}, {}, out);
}

void ScrubbedBody::add_counts(std::vector<std::pair<std::string, uint64_t>>& counts) const {
  if (matches() > 0) counts.emplace_back("body_secrets_scrubbed", matches());
  if (decoded_bytes() > 0) counts.emplace_back("body_bytes_decoded", decoded_bytes());
}

}  // namespace cordon::gateway::h2
