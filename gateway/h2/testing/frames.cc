#include "gateway/h2/testing/frames.h"

#include <nghttp2/nghttp2.h>

#include <stdexcept>

namespace cordon::gateway::h2::testing {

namespace {
void put32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}
uint32_t get32(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}
}  // namespace

std::string frame(uint8_t type, uint8_t flags, int32_t stream, std::string_view payload) {
  std::string out;
  size_t n = payload.size();
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  put32(out, static_cast<uint32_t>(stream) & 0x7fffffffu);
  out.append(payload);
  return out;
}

std::string preface() {
  return std::string(NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN) + frame(kSettings, 0, 0, "");
}

Encoder::Encoder() {
  nghttp2_hd_deflater* d = nullptr;
  if (nghttp2_hd_deflate_new(&d, 4096) != 0) throw std::runtime_error("hd_deflate_new");
  deflater_ = d;
}
Encoder::~Encoder() {
  nghttp2_hd_deflate_del(static_cast<nghttp2_hd_deflater*>(deflater_));
}

std::string Encoder::block(const Fields& fields) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [n, v] : fields) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                   NGHTTP2_NV_FLAG_NONE});
  }
  auto* d = static_cast<nghttp2_hd_deflater*>(deflater_);
  std::string out(nghttp2_hd_deflate_bound(d, nva.data(), nva.size()), '\0');
  ssize_t n = nghttp2_hd_deflate_hd(d, reinterpret_cast<uint8_t*>(out.data()), out.size(),
                                    nva.data(), nva.size());
  if (n < 0) throw std::runtime_error("hd_deflate_hd");
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Encoder::headers(int32_t stream, const Fields& fields, bool end_stream) {
  return frame(kHeaders, kEndHeaders | (end_stream ? kEndStream : 0), stream, block(fields));
}

std::string data(int32_t stream, std::string_view bytes, bool end_stream) {
  return frame(kData, end_stream ? kEndStream : 0, stream, bytes);
}

std::string rst_stream(int32_t stream, uint32_t code) {
  std::string p;
  put32(p, code);
  return frame(kRstStream, 0, stream, p);
}

std::string settings_ack() {
  return frame(kSettings, kAck, 0, "");
}

std::string ping(bool ack) {
  return frame(kPing, ack ? kAck : 0, 0, std::string(8, 'p'));
}

std::string window_update(int32_t stream, uint32_t increment) {
  std::string p;
  put32(p, increment);
  return frame(kWindowUpdate, 0, stream, p);
}

std::string priority(int32_t stream, int32_t depends_on) {
  std::string p;
  put32(p, static_cast<uint32_t>(depends_on));
  p.push_back(16);
  return frame(kPriority, 0, stream, p);
}

Fields request(const std::string& method, const std::string& authority, const std::string& path) {
  return {{":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}};
}

std::vector<Frame> read_frames(std::string& bytes) {
  std::vector<Frame> out;
  size_t pos = 0;
  while (bytes.size() - pos >= 9) {
    std::string_view h(bytes.data() + pos, 9);
    size_t len = static_cast<size_t>(static_cast<unsigned char>(h[0])) << 16 |
                 static_cast<size_t>(static_cast<unsigned char>(h[1])) << 8 |
                 static_cast<unsigned char>(h[2]);
    if (bytes.size() - pos < 9 + len) break;
    Frame f;
    f.type = static_cast<uint8_t>(h[3]);
    f.flags = static_cast<uint8_t>(h[4]);
    f.stream = static_cast<int32_t>(get32(h.substr(5)) & 0x7fffffffu);
    f.payload = bytes.substr(pos + 9, len);
    out.push_back(std::move(f));
    pos += 9 + len;
  }
  bytes.erase(0, pos);
  return out;
}

Decoder::Decoder() {
  nghttp2_hd_inflater* i = nullptr;
  if (nghttp2_hd_inflate_new(&i) != 0) throw std::runtime_error("hd_inflate_new");
  inflater_ = i;
}
Decoder::~Decoder() {
  nghttp2_hd_inflate_del(static_cast<nghttp2_hd_inflater*>(inflater_));
}

Fields Decoder::decode(const Frame& f) {
  Fields out;
  std::string_view in = f.payload;
  if (f.flags & 0x8) {  // PADDED
    size_t pad = static_cast<unsigned char>(in[0]);
    in = in.substr(1, in.size() - 1 - pad);
  }
  if (f.type == kHeaders && (f.flags & 0x20)) in.remove_prefix(5);  // PRIORITY
  auto* inf = static_cast<nghttp2_hd_inflater*>(inflater_);
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  size_t left = in.size();
  while (true) {
    nghttp2_nv nv;
    int flags = 0;
    ssize_t n = nghttp2_hd_inflate_hd2(inf, &nv, &flags, p, left, 1);
    if (n < 0) throw std::runtime_error("hd_inflate_hd2");
    p += n;
    left -= static_cast<size_t>(n);
    if (flags & NGHTTP2_HD_INFLATE_EMIT) {
      out.emplace_back(std::string(reinterpret_cast<char*>(nv.name), nv.namelen),
                       std::string(reinterpret_cast<char*>(nv.value), nv.valuelen));
    }
    if (flags & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inf);
      break;
    }
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) == 0 && left == 0) break;
  }
  return out;
}

uint32_t goaway_code(const Frame& f) {
  return f.payload.size() >= 8 ? get32(std::string_view(f.payload).substr(4)) : 0xffffffffu;
}
uint32_t rst_code(const Frame& f) {
  return f.payload.size() >= 4 ? get32(f.payload) : 0xffffffffu;
}

}  // namespace cordon::gateway::h2::testing
