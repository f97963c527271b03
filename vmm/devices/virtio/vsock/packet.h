// virtio-vsock packets (virtio 1.2 §5.10.6): the 44-byte header, its constants, and the parser of
// what the guest puts on the tx queue. The guest is hostile: the header is copied out of guest
// memory before it is looked at, its length is checked against both the chain and
// kMaxPacketBytes, and a header that names another CID, an unknown op or flags outside the
// spec is refused with an error that says which field was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::vmm::virtio {

struct VsockHeader {
  uint64_t src_cid;
  uint64_t dst_cid;
  uint32_t src_port;
  uint32_t dst_port;
  uint32_t len;
  uint16_t type;
  uint16_t op;
  uint32_t flags;
  uint32_t buf_alloc;
  uint32_t fwd_cnt;
} __attribute__((packed));
static_assert(sizeof(VsockHeader) == 44);

inline constexpr uint16_t kVsockOpRequest = 1, kVsockOpResponse = 2, kVsockOpRst = 3,
                          kVsockOpShutdown = 4, kVsockOpRw = 5, kVsockOpCreditUpdate = 6,
                          kVsockOpCreditRequest = 7;
inline constexpr uint16_t kVsockTypeStream = 1;
inline constexpr uint64_t kVsockHostCid = 2;
inline constexpr uint32_t kVsockShutdownRcv = 1, kVsockShutdownSend = 2;
inline constexpr uint32_t kVsockEventTransportReset = 0;
inline constexpr uint32_t kVsockMaxPacketBytes = 64 * 1024;  // Firecracker's maximum buffer

// One packet from the guest: the header as copied, and its payload (only RW carries one).
struct VsockPacket {
  VsockHeader hdr{};
  std::string payload;
};

// Checks a header copied from a tx chain whose readable part is `chain_bytes` long: the length
// fits the chain and kVsockMaxPacketBytes, the source is `guest_cid` and the destination the
// host, the op is known, SHUTDOWN flags are RCV/SEND only, and only RW carries a payload.
// The type is not checked here: a non-stream packet is well-formed and answered with RST.
Status check_tx_header(const VsockHeader& h, uint64_t chain_bytes, uint64_t guest_cid);

// The same checks over the bytes of a whole readable part (header first), and the payload
// copied out: what the device does with guest memory, in a form the fuzzer can drive.
Result<VsockPacket> parse_tx_packet(std::string_view bytes, uint64_t guest_cid);

}  // namespace cordon::vmm::virtio
