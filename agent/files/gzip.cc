#include "agent/files/gzip.h"

namespace cordon::agent::files {
namespace {
constexpr size_t kOutBytes = 64 * 1024;
constexpr int kGzipWindowBits = 15 + 16;  // 15-bit window, gzip wrapper
}  // namespace

GzipEncoder::GzipEncoder(int level) {
  ok_ = deflateInit2(&z_, level, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipEncoder::~GzipEncoder() {
  if (ok_) deflateEnd(&z_);
}

Status GzipEncoder::run(std::string_view in, int flush, const ByteSink& out) {
  if (!ok_) return fail("gzip encoder: zlib initialisation failed");
  char buf[kOutBytes];
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z_.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = sizeof(buf);
    int rc = deflate(&z_, flush);
    if (rc == Z_STREAM_ERROR) return fail("gzip encoder: deflate failed");
    size_t have = sizeof(buf) - z_.avail_out;
    if (have > 0)
      if (auto s = out(std::string_view(buf, have)); !s) return s;
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (z_.avail_in == 0 && z_.avail_out != 0)) return {};
  }
}

Status GzipEncoder::write(std::string_view in, const ByteSink& out) {
  if (in.empty()) return {};
  return run(in, Z_NO_FLUSH, out);
}

Status GzipEncoder::finish(const ByteSink& out) {
  return run({}, Z_FINISH, out);
}

GzipDecoder::GzipDecoder(GzipLimits limits) : limits_(limits) {
  ok_ = inflateInit2(&z_, kGzipWindowBits) == Z_OK;
}

GzipDecoder::~GzipDecoder() {
  if (ok_) inflateEnd(&z_);
}

Status GzipDecoder::write(std::string_view in, const ByteSink& out) {
  if (!ok_) return fail("gzip body: zlib initialisation failed");
  in_ += in.size();
  char buf[kOutBytes];
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z_.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    if (z_.avail_in > 0) in_member_ = any_member_ = true;
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = sizeof(buf);
    int rc = inflate(&z_, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      return fail(std::string("gzip body is corrupt at compressed byte ") +
                  std::to_string(in_ - z_.avail_in) + ": " + (z_.msg ? z_.msg : "inflate error"));
    size_t have = sizeof(buf) - z_.avail_out;
    out_ += have;
    if (out_ > limits_.ratio_grace_bytes && out_ > limits_.max_ratio * (in_ - z_.avail_in))
      return fail("gzip body expands more than " + std::to_string(limits_.max_ratio) + ":1 (" +
                  std::to_string(out_) + " bytes from " + std::to_string(in_ - z_.avail_in) +
                  "): refused as a decompression bomb");
    if (have > 0)
      if (auto s = out(std::string_view(buf, have)); !s) return s;
    if (rc == Z_STREAM_END) {
      in_member_ = false;
      if (inflateReset(&z_) != Z_OK) return fail("gzip body: inflateReset failed");
      if (z_.avail_in == 0) break;
    } else if (rc == Z_BUF_ERROR || (z_.avail_in == 0 && z_.avail_out != 0)) {
      break;  // all input consumed and no output pending
    }
  }
  return {};
}

Status GzipDecoder::finish() {
  if (!any_member_) return fail("gzip body is empty");
  if (in_member_) return fail("gzip body is truncated (ended inside a gzip member)");
  return {};
}

}  // namespace cordon::agent::files
