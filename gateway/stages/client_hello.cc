#include "gateway/stages/client_hello.h"

#include <algorithm>
#include <cstdio>

#include "common/host_name.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {
namespace {

constexpr uint8_t kContentHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeaderBytes = 5;
constexpr size_t kHandshakeHeaderBytes = 4;

constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtAlpn = 16;
constexpr uint16_t kExtSupportedVersions = 43;
constexpr uint16_t kExtPreSharedKey = 41;
constexpr uint16_t kExtEch = 0xfe0d;

std::string hex16(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04x", v & 0xffffu);
  return buf;
}

std::string hex8(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", v & 0xffu);
  return buf;
}

// Bounds-checked big-endian reader over one span. Every accessor fails instead of reading past
// the end; the parser never indexes the span directly.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  size_t offset() const { return off_; }
  size_t remaining() const { return data_.size() - off_; }

  bool u8(unsigned& v) {
    if (remaining() < 1) return false;
    v = uint8_t(data_[off_]);
    off_ += 1;
    return true;
  }
  bool u16(unsigned& v) {
    if (remaining() < 2) return false;
    v = (unsigned(uint8_t(data_[off_])) << 8) | uint8_t(data_[off_ + 1]);
    off_ += 2;
    return true;
  }
  bool bytes(size_t n, std::string_view& out) {
    if (remaining() < n) return false;
    out = data_.substr(off_, n);
    off_ += n;
    return true;
  }

 private:
  std::string_view data_;
  size_t off_ = 0;
};

HelloParse error(std::string reason) {
  HelloParse r;
  r.status = HelloStatus::kError;
  r.error = std::move(reason);
  return r;
}

// RFC 6066 §3. Exactly one entry, of type host_name, non-empty, a valid DNS name.
bool parse_sni(std::string_view ext, ClientHello& hello, std::string& why) {
  Reader r(ext);
  unsigned list_len = 0;
  if (!r.u16(list_len)) {
    why = "server_name extension shorter than its list length";
    return false;
  }
  if (list_len != r.remaining()) {
    why = "server_name list length " + std::to_string(list_len) + " != extension remainder " +
          std::to_string(r.remaining());
    return false;
  }
  if (list_len == 0) {
    why = "server_name list is empty";
    return false;
  }
  int names = 0;
  while (r.remaining() > 0) {
    unsigned type = 0, len = 0;
    std::string_view name;
    if (!r.u8(type) || !r.u16(len) || !r.bytes(len, name)) {
      why = "server_name entry truncated";
      return false;
    }
    if (type != 0) {
      why = "server_name entry of type " + std::to_string(type) + " (only host_name is accepted)";
      return false;
    }
    if (++names > 1) {
      why = "server_name list has more than one host_name";
      return false;
    }
    if (len == 0) {
      why = "server_name host_name is empty";
      return false;
    }
    // The host-name grammar the policy lints with (IP literals are never names, and RFC 6066
    // forbids both them and a trailing dot here).
    HostNameBuffer canonical;
    const HostNameCheck check = canonicalize_host_name(name, canonical, TrailingDot::kRefuse);
    if (!check) {
      why = "server_name host_name is not a valid DNS host name: " +
            host_name_error_message(name, check.error);
      return false;
    }
    hello.sni = std::string(canonical.data(), check.size);
  }
  return true;
}

// RFC 7301 §3.1. A non-empty list of non-empty protocol names.
bool parse_alpn(std::string_view ext, ClientHello& hello, std::string& why) {
  Reader r(ext);
  unsigned list_len = 0;
  if (!r.u16(list_len) || list_len != r.remaining() || list_len == 0) {
    why = "ALPN protocol list length does not match the extension (or is empty)";
    return false;
  }
  while (r.remaining() > 0) {
    unsigned len = 0;
    std::string_view proto;
    if (!r.u8(len) || !r.bytes(len, proto)) {
      why = "ALPN protocol name truncated";
      return false;
    }
    if (len == 0) {
      why = "ALPN protocol name is empty";
      return false;
    }
    hello.alpn.emplace_back(proto);
  }
  return true;
}

// RFC 8446 §4.2.1 (ClientHello form): a 1-byte length, then 2..254 bytes of versions.
bool parse_supported_versions(std::string_view ext, ClientHello& hello, std::string& why) {
  Reader r(ext);
  unsigned len = 0;
  if (!r.u8(len) || len != r.remaining() || len < 2 || len % 2 != 0) {
    why = "supported_versions length is odd, empty or does not match the extension";
    return false;
  }
  while (r.remaining() > 0) {
    unsigned v = 0;
    (void)r.u16(v);  // cannot fail: the remainder is even and was checked above
    hello.supported_versions.push_back(uint16_t(v));
  }
  return true;
}

bool version_acceptable(unsigned v) {
  return v >= 0x0301 && v <= 0x0303;
}

// The ClientHello body (after the 4-byte handshake header), RFC 8446 §4.1.2.
HelloParse parse_body(std::string_view body, ClientHello hello) {
  Reader r(body);
  auto at = [&r] { return " at hello offset " + std::to_string(r.offset() + 4); };
  unsigned legacy_version = 0;
  if (!r.u16(legacy_version)) return error("ClientHello truncated before legacy_version");
  if (!version_acceptable(legacy_version)) {
    return error("ClientHello legacy_version " + hex16(legacy_version) +
                 " refused (accepted: 0x0301..0x0303)");
  }
  hello.legacy_version = uint16_t(legacy_version);
  std::string_view random;
  if (!r.bytes(32, random)) return error("ClientHello truncated in random" + at());
  unsigned sid_len = 0;
  std::string_view sid;
  if (!r.u8(sid_len) || sid_len > 32 || !r.bytes(sid_len, sid)) {
    return error("ClientHello legacy_session_id truncated or longer than 32 bytes" + at());
  }
  unsigned cs_len = 0;
  std::string_view suites;
  if (!r.u16(cs_len) || cs_len < 2 || cs_len % 2 != 0 || !r.bytes(cs_len, suites)) {
    return error("ClientHello cipher_suites empty, odd or truncated" + at());
  }
  unsigned comp_len = 0;
  std::string_view comp;
  if (!r.u8(comp_len) || comp_len < 1 || !r.bytes(comp_len, comp)) {
    return error("ClientHello compression_methods empty or truncated" + at());
  }
  if (comp.find('\0') == std::string_view::npos) {
    return error("ClientHello compression_methods lacks the null method");
  }
  if (r.remaining() == 0) {
    // A hello without extensions (pre-TLS 1.2 style): valid, and it has no SNI.
    HelloParse done;
    done.status = HelloStatus::kDone;
    done.hello = std::move(hello);
    return done;
  }
  unsigned ext_total = 0;
  if (!r.u16(ext_total)) return error("ClientHello extensions length truncated" + at());
  if (ext_total != r.remaining()) {
    return error("ClientHello extensions length " + std::to_string(ext_total) + " != bytes left " +
                 std::to_string(r.remaining()) + " (trailing garbage or truncation)");
  }
  std::vector<uint16_t> seen;
  bool psk_seen = false;
  while (r.remaining() > 0) {
    size_t ext_offset = r.offset() + 4;
    unsigned type = 0, len = 0;
    std::string_view data;
    if (!r.u16(type) || !r.u16(len) || !r.bytes(len, data)) {
      return error("extension at hello offset " + std::to_string(ext_offset) + " truncated");
    }
    if (psk_seen) return error("pre_shared_key extension is not the last extension");
    if (std::find(seen.begin(), seen.end(), uint16_t(type)) != seen.end()) {
      return error("duplicate extension " + hex16(type) + " at hello offset " +
                   std::to_string(ext_offset));
    }
    seen.push_back(uint16_t(type));
    std::string why;
    bool ok = true;
    switch (type) {
      case kExtServerName:
        ok = parse_sni(data, hello, why);
        break;
      case kExtAlpn:
        ok = parse_alpn(data, hello, why);
        break;
      case kExtSupportedVersions:
        ok = parse_supported_versions(data, hello, why);
        break;
      case kExtPreSharedKey:
        psk_seen = true;
        break;
      case kExtEch:
        hello.ech_offered = true;
        break;
      default:
        break;
    }
    if (!ok) return error(why + " (extension at hello offset " + std::to_string(ext_offset) + ")");
  }
  HelloParse done;
  done.status = HelloStatus::kDone;
  done.hello = std::move(hello);
  return done;
}

}  // namespace

std::string_view to_string(HelloStatus status) {
  switch (status) {
    case HelloStatus::kNeedMore:
      return "need_more";
    case HelloStatus::kDone:
      return "done";
    case HelloStatus::kNotTls:
      return "not_tls";
    case HelloStatus::kError:
      return "error";
  }
  return "unknown";
}

HelloParse parse_client_hello(std::string_view in) {
  HelloParse need_more;  // status kNeedMore
  if (in.empty()) return need_more;
  unsigned first = uint8_t(in[0]);
  if (first != kContentHandshake) {
    if (first & 0x80) {
      return error("SSLv2-style record header (first byte " + hex8(first) + ") refused");
    }
    if (first >= 20 && first <= 24) {
      return error("TLS record of content type " + std::to_string(first) +
                   " before the ClientHello");
    }
    HelloParse r;
    r.status = HelloStatus::kNotTls;
    r.error = "first byte " + hex8(first) + " is not a TLS handshake record";
    return r;
  }

  // Reassemble the handshake message from as many handshake records as it takes.
  std::string message;
  ClientHello hello;
  size_t pos = 0;
  while (true) {
    if (in.size() - pos < kRecordHeaderBytes) {
      if (pos + kRecordHeaderBytes >= kMaxClientHelloBytes) {
        return error("ClientHello exceeds " + std::to_string(kMaxClientHelloBytes) +
                     " bytes on the wire");
      }
      if (in.size() == pos) return need_more;
      // Report the two header bytes that are already visible as early as possible.
      if (in.size() - pos >= 2 && uint8_t(in[pos]) == kContentHandshake &&
          uint8_t(in[pos + 1]) != 3) {
        return error("record at offset " + std::to_string(pos) + ": version major byte " +
                     hex8(uint8_t(in[pos + 1])) + " is not 3");
      }
      if (uint8_t(in[pos]) != kContentHandshake) {
        return error("record at offset " + std::to_string(pos) + ": content type " +
                     std::to_string(uint8_t(in[pos])) + " inside the ClientHello");
      }
      return need_more;
    }
    unsigned type = uint8_t(in[pos]);
    unsigned version = (unsigned(uint8_t(in[pos + 1])) << 8) | uint8_t(in[pos + 2]);
    size_t len = (size_t(uint8_t(in[pos + 3])) << 8) | uint8_t(in[pos + 4]);
    // Built only on the error paths: the common path allocates nothing per record.
    auto where = [&] {
      return "record " + std::to_string(hello.record_count) + " at offset " + std::to_string(pos);
    };
    if (type != kContentHandshake) {
      return error(where() + ": content type " + std::to_string(type) + " inside the ClientHello");
    }
    if (!version_acceptable(version)) {
      return error(where() + ": record version " + hex16(version) +
                   " refused (accepted: 0x0301..0x0303)");
    }
    if (hello.record_count == 0) {
      hello.record_version = uint16_t(version);
    } else if (version != hello.record_version) {
      return error(where() + ": record version " + hex16(version) + " differs from the first (" +
                   hex16(hello.record_version) + ")");
    }
    if (len == 0) return error(where() + ": zero-length handshake record");
    if (len > kMaxTlsRecordPayloadBytes) {
      return error(where() + ": record length " + std::to_string(len) + " exceeds 2^14");
    }
    if (pos + kRecordHeaderBytes + len > kMaxClientHelloBytes) {
      return error(where() + ": ClientHello exceeds " + std::to_string(kMaxClientHelloBytes) +
                   " bytes on the wire");
    }
    size_t available = std::min(len, in.size() - pos - kRecordHeaderBytes);
    message.append(in.substr(pos + kRecordHeaderBytes, available));
    bool record_complete = available == len;
    if (record_complete) {
      pos += kRecordHeaderBytes + len;
      ++hello.record_count;
    }

    if (message.size() >= 1 && uint8_t(message[0]) != kHandshakeClientHello) {
      return error("first handshake message has type " + std::to_string(uint8_t(message[0])) +
                   ", not ClientHello");
    }
    if (message.size() >= kHandshakeHeaderBytes) {
      size_t body_len = (size_t(uint8_t(message[1])) << 16) | (size_t(uint8_t(message[2])) << 8) |
                        uint8_t(message[3]);
      // Lower bound of the wire size: this message plus one record header.
      if (body_len + kHandshakeHeaderBytes + kRecordHeaderBytes > kMaxClientHelloBytes) {
        return error("ClientHello length " + std::to_string(body_len) + " exceeds the cap of " +
                     std::to_string(kMaxClientHelloBytes) + " bytes");
      }
      size_t total = body_len + kHandshakeHeaderBytes;
      if (message.size() > total) {
        return error(where() + ": " + std::to_string(message.size() - total) +
                     " bytes after the ClientHello in its record");
      }
      if (message.size() == total && record_complete) {
        hello.wire_bytes = pos;
        return parse_body(std::string_view(message).substr(kHandshakeHeaderBytes),
                          std::move(hello));
      }
    }
    if (!record_complete) return need_more;
  }
}

}  // namespace cordon::gateway
