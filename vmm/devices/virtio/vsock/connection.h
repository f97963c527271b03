// The state of one vsock stream between the guest and a host Unix socket, without the socket:
// what the muxer (vsock.h) asks before it reads, writes or answers, so that the rules can be
// tested on their own. States: kConnecting (the host asked the guest with REQUEST and waits for
// its RESPONSE), kEstablished, kClosing (the host side is gone, we sent SHUTDOWN and wait for
// the guest's RST). A connection that stays kConnecting past kRequestTimeout or kClosing past
// kShutdownTimeout has expired: the muxer resets and frees it, so a guest that never answers
// cannot pin host state.
//
// Credit (virtio 1.2 §5.10.6.3): bytes from the guest wait in a buffer until the Unix socket
// takes them and only then count in fwd_cnt, so a guest that honours our buf_alloc can never
// have more than kBufAlloc bytes buffered here; one that sends more broke the protocol.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "vmm/devices/virtio/vsock/packet.h"

namespace cordon::vmm::virtio {

class VsockConnection {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kConnecting, kEstablished, kClosing };

  static constexpr uint32_t kBufAlloc = 256 * 1024;  // what we tell the guest we can hold
  static constexpr Clock::duration kRequestTimeout = std::chrono::seconds(2);
  static constexpr Clock::duration kShutdownTimeout = std::chrono::seconds(2);

  // A connection the guest asked for (it sent REQUEST; we answer RESPONSE at once), or one the
  // host asked for (we send REQUEST and wait).
  static VsockConnection from_guest(uint32_t local_port, uint32_t peer_port,
                                    const VsockHeader& request);
  static VsockConnection from_host(uint32_t local_port, uint32_t peer_port, Clock::time_point now);

  State state() const { return state_; }
  uint32_t local_port() const { return local_port_; }
  uint32_t peer_port() const { return peer_port_; }
  bool host_initiated() const { return host_initiated_; }

  // Every guest packet carries its current credit.
  void update_peer_credit(const VsockHeader& h);
  // Bytes we may send the guest now: peer_buf_alloc - (tx_cnt - peer_fwd_cnt).
  uint32_t peer_credit() const;
  void sent_to_guest(uint32_t n) { tx_cnt_ += n; }

  // The guest's RESPONSE to our REQUEST; false when none was awaited.
  bool on_response();
  // Bytes from the guest (RW). False: the guest overran our buf_alloc, or sent data where none
  // may come (before RESPONSE, after its SHUTDOWN SEND).
  bool buffer_from_guest(std::string_view data);
  // Puts bytes before any the guest sent (the "OK <port>\n" of the handshake). They are ours,
  // not the guest's: they never count in fwd_cnt, or the guest would see credit it never used
  // (Linux then computes negative space and its writes block).
  void buffer_for_host_first(std::string_view data) {
    to_host_.insert(off_, data);
    own_bytes_ += data.size();
  }
  std::string_view pending_to_host() const { return std::string_view(to_host_).substr(off_); }
  // `n` bytes of pending_to_host() reached the socket. True when the guest should hear of the
  // freed space now (a quarter of the window since the last update), which the muxer does with
  // CREDIT_UPDATE, and which marks the credit as announced.
  bool delivered_to_host(size_t n);
  void credit_announced() { last_announced_fwd_cnt_ = fwd_cnt_; }

  // SHUTDOWN from the guest (flags accumulate).
  void on_guest_shutdown(uint32_t flags) { guest_shutdown_ |= flags; }
  uint32_t guest_shutdown() const { return guest_shutdown_; }
  // The host socket reached EOF (its writer is done): we tell the guest SHUTDOWN SEND once.
  void on_host_eof() { host_eof_ = true; }
  bool host_eof() const { return host_eof_; }
  // Whether both directions are finished and the guest waits for our RST: it shut down SEND
  // (and RCV, or the host is done too) and everything it sent reached the socket.
  bool finished() const;
  // Whether the socket still wants bytes from the guest written (SHUT_WR when the guest is done).
  bool want_host_shutdown_write() const {
    return (guest_shutdown_ & kVsockShutdownSend) && pending_to_host().empty();
  }

  // Whether we may read the host socket now (established, credit left, host not at EOF, the
  // guest still receives).
  bool may_read_host() const;
  // Asking the guest for credit once per stall (CREDIT_REQUEST) instead of on every wakeup.
  bool take_credit_request();

  // The host socket is gone: SHUTDOWN was sent, the guest's RST is awaited until the deadline.
  void start_closing(Clock::time_point now);
  bool expired(Clock::time_point now) const;

  // A header to the guest for this connection, with our credit.
  VsockHeader header(uint64_t guest_cid, uint16_t op) const;

 private:
  VsockConnection() = default;

  State state_ = State::kConnecting;
  uint32_t local_port_ = 0;  // host side
  uint32_t peer_port_ = 0;   // guest side
  bool host_initiated_ = false;
  uint32_t peer_buf_alloc_ = 0, peer_fwd_cnt_ = 0;
  uint32_t tx_cnt_ = 0;   // bytes we sent the guest
  uint32_t fwd_cnt_ = 0;  // bytes from the guest delivered to the socket
  uint32_t last_announced_fwd_cnt_ = 0;
  bool credit_requested_ = false;
  std::string to_host_;  // bytes not yet taken by the socket, from off_
  size_t off_ = 0;
  size_t own_bytes_ = 0;  // how many of them at the front are ours (the handshake line)
  uint32_t guest_shutdown_ = 0;
  bool host_eof_ = false;
  Clock::time_point deadline_{};
};

}  // namespace cordon::vmm::virtio
