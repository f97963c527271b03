// libFuzzer target for the vsock packet parser (vmm/devices/virtio/vsock/packet.h) and the
// connection state machine behind it: the input is a sequence of tx packets as a guest would
// place them in a chain (u16 length, then that many bytes). Each is parsed; those accepted are
// applied to one connection the way the muxer applies them, and the state machine's promises
// are checked after every step: the guest can never make us buffer more than kBufAlloc, nor
// make us believe we may send more than its buf_alloc. A crash, a sanitizer report or a failed
// check is a bug.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "vmm/devices/virtio/vsock/connection.h"
#include "vmm/devices/virtio/vsock/packet.h"

using namespace cordon::vmm::virtio;

namespace {

constexpr uint64_t kCid = 3;

void check(bool ok) {
  if (!ok) std::abort();
}

void apply(VsockConnection& c, const VsockPacket& p) {
  const VsockHeader& h = p.hdr;
  c.update_peer_credit(h);
  switch (h.op) {
    case kVsockOpResponse:
      if (c.on_response()) c.buffer_for_host_first("OK 1073741824\n");
      break;
    case kVsockOpRw:
      (void)c.buffer_from_guest(p.payload);
      break;
    case kVsockOpShutdown:
      c.on_guest_shutdown(h.flags);
      break;
    default:
      break;
  }
  // The host side takes some bytes and sends some back, as the muxer would.
  std::string_view pending = c.pending_to_host();
  if (!pending.empty() && (h.fwd_cnt & 1)) {
    if (c.delivered_to_host(pending.size() / 2 + 1)) c.credit_announced();
  }
  if (c.may_read_host()) c.sent_to_guest(std::min<uint32_t>(c.peer_credit(), h.flags & 0xFFFF));
  check(c.pending_to_host().size() <= VsockConnection::kBufAlloc + 64);
  check(c.peer_credit() <= h.buf_alloc);
  check(!c.finished() || c.pending_to_host().empty());
  check(!c.may_read_host() || c.peer_credit() > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  VsockConnection c = in.size() % 2 ? VsockConnection::from_host(1u << 30, 49983, {})
                                    : VsockConnection::from_guest(5000, 1234, VsockHeader{});
  while (in.size() >= 2) {
    size_t n = static_cast<uint8_t>(in[0]) | (size_t(static_cast<uint8_t>(in[1])) << 8);
    in.remove_prefix(2);
    n = std::min(n, in.size());
    auto p = parse_tx_packet(in.substr(0, n), kCid);
    in.remove_prefix(n);
    if (!p) continue;
    check(p->payload.size() == p->hdr.len);
    check(p->hdr.len <= kVsockMaxPacketBytes);
    check(p->hdr.src_cid == kCid && p->hdr.dst_cid == kVsockHostCid);
    apply(c, *p);
  }
  return 0;
}
