#include "vmm/devices/virtio/vsock/packet.h"

#include <cstring>

namespace cordon::vmm::virtio {

Status check_tx_header(const VsockHeader& h, uint64_t chain_bytes, uint64_t guest_cid) {
  if (chain_bytes < sizeof(VsockHeader))
    return fail("vsock tx packet: " + std::to_string(chain_bytes) +
                " readable bytes, shorter than the 44-byte header");
  if (h.len > kVsockMaxPacketBytes)
    return fail("vsock tx packet: len " + std::to_string(h.len) + " exceeds " +
                std::to_string(kVsockMaxPacketBytes));
  if (h.len > chain_bytes - sizeof(VsockHeader))
    return fail("vsock tx packet: len " + std::to_string(h.len) + " but only " +
                std::to_string(chain_bytes - sizeof(VsockHeader)) + " payload bytes in the chain");
  if (h.src_cid != guest_cid)
    return fail("vsock tx packet: src_cid " + std::to_string(h.src_cid) + " is not the guest's " +
                std::to_string(guest_cid));
  if (h.dst_cid != kVsockHostCid)
    return fail("vsock tx packet: dst_cid " + std::to_string(h.dst_cid) + " is not the host");
  if (h.op < kVsockOpRequest || h.op > kVsockOpCreditRequest)
    return fail("vsock tx packet: unknown op " + std::to_string(h.op));
  if (h.op == kVsockOpShutdown && (h.flags & ~(kVsockShutdownRcv | kVsockShutdownSend)) != 0)
    return fail("vsock tx packet: SHUTDOWN flags " + std::to_string(h.flags));
  if (h.op != kVsockOpRw && h.len != 0)
    return fail("vsock tx packet: op " + std::to_string(h.op) + " with a " + std::to_string(h.len) +
                "-byte payload");
  return {};
}

Result<VsockPacket> parse_tx_packet(std::string_view bytes, uint64_t guest_cid) {
  VsockPacket p;
  if (bytes.size() >= sizeof p.hdr) std::memcpy(&p.hdr, bytes.data(), sizeof p.hdr);
  if (auto st = check_tx_header(p.hdr, bytes.size(), guest_cid); !st) return fail(st.error());
  p.payload.assign(bytes.substr(sizeof p.hdr, p.hdr.len));
  return p;
}

}  // namespace cordon::vmm::virtio
