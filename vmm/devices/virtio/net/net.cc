#include "vmm/devices/virtio/net/net.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cordon::vmm::virtio {

bool parse_mac(const std::string& s, uint8_t out[6]) {
  unsigned v[6];
  char extra;
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &extra) != 6)
    return false;
  for (int i = 0; i < 6; ++i) out[i] = static_cast<uint8_t>(v[i]);
  return true;
}

Result<std::unique_ptr<Net>> Net::create(const std::string& tap_name, const std::string& mac,
                                         devices::EventLoop* loop) {
  uint8_t m[6];
  if (!parse_mac(mac, m)) return fail("virtio-net: bad MAC address '" + mac + "'");
  if (tap_name.empty() || tap_name.size() >= IFNAMSIZ)
    return fail("virtio-net: bad TAP name '" + tap_name + "'");
  int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(std::string("open /dev/net/tun: ") + std::strerror(errno));
  kvm::Fd owned(fd);
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, tap_name.c_str(), tap_name.size());
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  // TUNSETIFF takes a struct ifreq; TUNSETVNETHDRSZ an int.
  if (::ioctl(fd, TUNSETIFF, &ifr) < 0)
    return fail("TUNSETIFF " + tap_name + ": " + std::strerror(errno));
  int hdr = static_cast<int>(kVnetHeaderBytes);
  if (::ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0)
    return fail(std::string("TUNSETVNETHDRSZ: ") + std::strerror(errno));
  std::unique_ptr<Net> n(new Net(owned.release(), loop));
  std::memcpy(n->mac_, m, 6);
  return n;
}

std::unique_ptr<Net> Net::from_fd(int fd, const uint8_t mac[6], devices::EventLoop* loop) {
  std::unique_ptr<Net> n(new Net(fd, loop));
  std::memcpy(n->mac_, mac, 6);
  n->is_tap_ = false;
  return n;
}

Net::~Net() {
  if (tap_armed_) loop_->remove(tap_.get());
}

void Net::read_config(uint64_t offset, uint8_t* data, size_t len) {
  uint8_t cfg[12] = {};
  std::memcpy(cfg, mac_, 6);
  cfg[6] = 1;  // status: link up
  for (size_t i = 0; i < len; ++i) data[i] = offset + i < sizeof cfg ? cfg[offset + i] : 0;
}

Status Net::activate(const DeviceContext& ctx) {
  ctx_ = ctx;
  if (is_tap_) {
    unsigned offload = 0;
    if (ctx.features & kNetFGuestCsum) offload |= TUN_F_CSUM;
    if ((ctx.features & kNetFGuestCsum) && (ctx.features & kNetFGuestTso4)) offload |= TUN_F_TSO4;
    if ((ctx.features & kNetFGuestCsum) && (ctx.features & kNetFGuestTso6)) offload |= TUN_F_TSO6;
    if (::ioctl(tap_.get(), TUNSETOFFLOAD, offload) < 0)
      return fail(std::string("TUNSETOFFLOAD: ") + std::strerror(errno));
  }
  if (!tap_armed_) {
    if (auto st = loop_->add(tap_.get(), EPOLLIN, [this](uint32_t ev) { on_tap(ev); }); !st)
      return st;
    tap_armed_ = true;
  }
  active_ = true;
  return {};
}

void Net::reset() {
  active_ = false;
  pending_.clear();
  ctx_ = {};
}

void Net::notify(int queue) {
  if (!active_) return;
  if (queue == 1) process_tx();
  if (queue == 0) {
    process_rx();
    (void)loop_->modify(tap_.get(), EPOLLIN);  // buffers may be back: listen to the TAP again
  }
}

void Net::process_tx() {
  std::vector<uint8_t> frame;
  serve_queue(ctx_, 1, [&](const Chain& c) -> uint32_t {
    if (c.readable_bytes >= kVnetHeaderBytes && c.readable_bytes <= kMaxFrameBytes) {
      frame.resize(c.readable_bytes);
      c.read(*ctx_.mem, 0, frame.data(), frame.size());  // copy out before the TAP sees it
      // The header goes through unchanged: the TAP was told its size (TUNSETVNETHDRSZ).
      if (::write(tap_.get(), frame.data(), frame.size()) >= 0) ++tx_frames_;
    }
    return 0;  // the device wrote nothing into a tx chain
  });
}

bool Net::deliver(const std::vector<uint8_t>& frame) {
  Queue& q = (*ctx_.queues)[0];
  const bool mrg = (ctx_.features & kNetFMrgRxbuf) != 0;
  // Spread the frame over as many chains as it needs (MRG_RXBUF), or one chain.
  std::vector<std::pair<uint16_t, uint32_t>> uses;
  size_t off = 0;
  uint16_t saved_next = q.next_avail;
  while (off < frame.size()) {
    auto chain = q.pop(*ctx_.mem);
    if (!chain) {
      ctx_.needs_reset();
      return true;  // drop
    }
    if (!chain->has_value()) {
      q.next_avail = saved_next;  // not enough buffers: give them all back, retry later
      return false;
    }
    const Chain& c = **chain;
    size_t n = c.write(*ctx_.mem, 0, frame.data() + off, frame.size() - off);
    if (n == 0 && c.writable_bytes == 0) {
      uses.push_back({c.head, 0});
      continue;
    }
    uses.push_back({c.head, static_cast<uint32_t>(n)});
    off += n;
    if (!mrg) break;  // one chain per frame; a longer frame is truncated
  }
  if (mrg && !uses.empty()) {  // num_buffers at header offset 10 of the first chain
    uint16_t nb = static_cast<uint16_t>(uses.size());
    q.next_avail = saved_next;
    auto first = q.pop(*ctx_.mem);
    if (first && first->has_value()) (*first)->write(*ctx_.mem, 10, &nb, 2);
    q.next_avail = static_cast<uint16_t>(saved_next + uses.size());
  }
  for (auto& [head, len] : uses) (void)q.add_used(*ctx_.mem, head, len);
  ++rx_frames_;
  return true;
}

void Net::process_rx() {
  Queue& q = (*ctx_.queues)[0];
  bool delivered = false;
  while (true) {
    if (pending_.empty()) {
      pending_.resize(kMaxFrameBytes);
      ssize_t n = ::read(tap_.get(), pending_.data(), pending_.size());
      if (n <= 0) {
        pending_.clear();
        break;
      }
      pending_.resize(static_cast<size_t>(n));
      if (!is_tap_) {  // test backends carry bare frames: add an empty header
        pending_.insert(pending_.begin(), kVnetHeaderBytes, 0);
      }
    }
    if (!deliver(pending_)) {
      (void)loop_->modify(tap_.get(), 0);  // wait for the guest's rx kick
      break;
    }
    pending_.clear();
    delivered = true;
  }
  if (delivered && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
}

void Net::on_tap(uint32_t) {
  std::lock_guard lock(*mu_);
  if (active_) process_rx();
}

}  // namespace cordon::vmm::virtio
