// Streaming gzip (RFC 1952) stages over zlib, socket-free, each with a fixed-size output buffer:
// GzipEncoder for `Accept-Encoding: gzip` downloads, GzipDecoder for `Content-Encoding: gzip`
// uploads. The decoder refuses absurd expansion (a gzip bomb) before it has written much.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::agent::files {

// Receives output pieces; an error stops the stage.
using ByteSink = std::function<Status(std::string_view)>;

class GzipEncoder {
 public:
  explicit GzipEncoder(int level = Z_BEST_SPEED);
  ~GzipEncoder();
  GzipEncoder(const GzipEncoder&) = delete;
  GzipEncoder& operator=(const GzipEncoder&) = delete;

  Status write(std::string_view in, const ByteSink& out);
  Status finish(const ByteSink& out);  // trailer; no write() after it

 private:
  Status run(std::string_view in, int flush, const ByteSink& out);
  z_stream z_{};
  bool ok_ = false;
};

struct GzipLimits {
  // Decompressed output may exceed `max_ratio` × compressed input only while it is below
  // `ratio_grace_bytes`. Deflate's own ceiling is ~1032:1; real files rarely pass 100:1, a bomb
  // (zeros) sits near the ceiling. So 1 GiB of zeros sent as 1 MiB of gzip is refused after
  // 64 MiB, while ordinary data is unaffected.
  uint64_t max_ratio = 200;
  uint64_t ratio_grace_bytes = 64ull << 20;
};

class GzipDecoder {
 public:
  explicit GzipDecoder(GzipLimits limits = {});
  ~GzipDecoder();
  GzipDecoder(const GzipDecoder&) = delete;
  GzipDecoder& operator=(const GzipDecoder&) = delete;

  // Decompresses `in` (any split), concatenated gzip members included.
  Status write(std::string_view in, const ByteSink& out);
  // Fails when the input ended inside a member (truncated upload) or had no member at all.
  Status finish();

  uint64_t bytes_in() const { return in_; }
  uint64_t bytes_out() const { return out_; }

 private:
  z_stream z_{};
  bool ok_ = false;
  bool in_member_ = false;  // a member started and its trailer has not been read
  bool any_member_ = false;
  GzipLimits limits_;
  uint64_t in_ = 0;
  uint64_t out_ = 0;
};

}  // namespace cordon::agent::files
