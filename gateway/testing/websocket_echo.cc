#include "gateway/testing/websocket_echo.h"

#include <openssl/evp.h>

#include <cstdint>

#include "common/encoding.h"

namespace cordon::gateway::testing {

std::string websocket_accept(std::string_view key) {
  std::string in = std::string(key) + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha1(), nullptr);
  return base64_encode(std::string_view(reinterpret_cast<const char*>(md), len));
}

void websocket_echo(std::string& buf, const std::function<bool()>& fill,
                    const std::function<bool(std::string_view)>& write) {
  auto need = [&](size_t n) {
    while (buf.size() < n) {
      if (!fill()) return false;
    }
    return true;
  };
  while (true) {
    if (!need(2)) return;
    auto b0 = static_cast<unsigned char>(buf[0]), b1 = static_cast<unsigned char>(buf[1]);
    bool masked = (b1 & 0x80) != 0;
    uint64_t len = b1 & 0x7f;
    size_t at = 2;
    if (len >= 126) {
      size_t n = len == 126 ? 2 : 8;
      if (!need(at + n)) return;
      len = 0;
      for (size_t i = 0; i < n; ++i) len = (len << 8) | static_cast<unsigned char>(buf[at + i]);
      at += n;
    }
    if (len > (1u << 24)) return;
    size_t total = at + (masked ? 4 : 0) + static_cast<size_t>(len);
    if (!need(total)) return;
    std::string payload = buf.substr(at + (masked ? 4 : 0), static_cast<size_t>(len));
    if (masked) {
      for (size_t i = 0; i < payload.size(); ++i) payload[i] ^= buf[at + (i % 4)];
    }
    buf.erase(0, total);
    unsigned opcode = b0 & 0x0f;
    unsigned out_opcode = opcode == 0x9 ? 0xA : opcode;
    std::string frame;
    frame += static_cast<char>((b0 & 0x80) | out_opcode);
    if (payload.size() < 126) {
      frame += static_cast<char>(payload.size());
    } else if (payload.size() < 65536) {
      frame += static_cast<char>(126);
      frame += static_cast<char>(payload.size() >> 8);
      frame += static_cast<char>(payload.size() & 0xff);
    } else {
      frame += static_cast<char>(127);
      for (int i = 7; i >= 0; --i) frame += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
    }
    frame += payload;
    if (!write(frame) || opcode == 0x8) return;
  }
}

}  // namespace cordon::gateway::testing
