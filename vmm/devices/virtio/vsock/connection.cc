#include "vmm/devices/virtio/vsock/connection.h"

#include <algorithm>

namespace cordon::vmm::virtio {

VsockConnection VsockConnection::from_guest(uint32_t local_port, uint32_t peer_port,
                                            const VsockHeader& request) {
  VsockConnection c;
  c.local_port_ = local_port;
  c.peer_port_ = peer_port;
  c.state_ = State::kEstablished;
  c.update_peer_credit(request);
  return c;
}

VsockConnection VsockConnection::from_host(uint32_t local_port, uint32_t peer_port,
                                           Clock::time_point now) {
  VsockConnection c;
  c.local_port_ = local_port;
  c.peer_port_ = peer_port;
  c.host_initiated_ = true;
  c.state_ = State::kConnecting;
  c.deadline_ = now + kRequestTimeout;
  return c;
}

void VsockConnection::update_peer_credit(const VsockHeader& h) {
  peer_buf_alloc_ = h.buf_alloc;
  peer_fwd_cnt_ = h.fwd_cnt;
  if (peer_credit() > 0) credit_requested_ = false;
}

uint32_t VsockConnection::peer_credit() const {
  // Unsigned wrap-around is the protocol's: the counters are free-running u32.
  const uint32_t in_flight = tx_cnt_ - peer_fwd_cnt_;
  return peer_buf_alloc_ > in_flight ? peer_buf_alloc_ - in_flight : 0;
}

bool VsockConnection::on_response() {
  if (!host_initiated_ || state_ != State::kConnecting) return false;
  state_ = State::kEstablished;
  return true;
}

bool VsockConnection::buffer_from_guest(std::string_view data) {
  if (state_ != State::kEstablished || (guest_shutdown_ & kVsockShutdownSend)) return false;
  if (pending_to_host().size() - own_bytes_ + data.size() > kBufAlloc) return false;
  if (off_ > 0 && off_ == to_host_.size()) {
    to_host_.clear();
    off_ = 0;
  }
  to_host_.append(data);
  return true;
}

bool VsockConnection::delivered_to_host(size_t n) {
  off_ += n;
  const size_t own = std::min(n, own_bytes_);
  own_bytes_ -= own;
  n -= own;
  if (off_ == to_host_.size()) {
    to_host_.clear();
    off_ = 0;
  } else if (off_ > kBufAlloc) {  // keep the buffer from growing by its consumed prefix
    to_host_.erase(0, off_);
    off_ = 0;
  }
  fwd_cnt_ += static_cast<uint32_t>(n);
  return fwd_cnt_ - last_announced_fwd_cnt_ >= kBufAlloc / 4;
}

bool VsockConnection::finished() const {
  if (!(guest_shutdown_ & kVsockShutdownSend) || !pending_to_host().empty()) return false;
  return (guest_shutdown_ & kVsockShutdownRcv) || host_eof_;
}

bool VsockConnection::may_read_host() const {
  return state_ == State::kEstablished && !host_eof_ && !(guest_shutdown_ & kVsockShutdownRcv) &&
         peer_credit() > 0;
}

bool VsockConnection::take_credit_request() {
  if (credit_requested_ || state_ != State::kEstablished || peer_credit() > 0) return false;
  credit_requested_ = true;
  return true;
}

void VsockConnection::start_closing(Clock::time_point now) {
  state_ = State::kClosing;
  to_host_.clear();
  off_ = 0;
  own_bytes_ = 0;
  deadline_ = now + kShutdownTimeout;
}

bool VsockConnection::expired(Clock::time_point now) const {
  return state_ != State::kEstablished && now >= deadline_;
}

VsockHeader VsockConnection::header(uint64_t guest_cid, uint16_t op) const {
  VsockHeader h{};
  h.src_cid = kVsockHostCid;
  h.dst_cid = guest_cid;
  h.src_port = local_port_;
  h.dst_port = peer_port_;
  h.type = kVsockTypeStream;
  h.op = op;
  h.buf_alloc = kBufAlloc;
  h.fwd_cnt = fwd_cnt_;
  return h;
}

}  // namespace cordon::vmm::virtio
