#include "vmm/devices/virtio/vsock/vsock.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon::vmm::virtio {
namespace {

constexpr uint32_t kShutdownRcv = 1, kShutdownSend = 2;
constexpr uint32_t kEventTransportReset = 0;

Result<int> unix_socket(const std::string& path, bool listen_mode) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return fail("vsock socket path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(std::string("socket: ") + std::strerror(errno));
  // sockaddr_un is the address type for AF_UNIX; the cast is the sockets API's convention.
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if (listen_mode) {
    ::unlink(path.c_str());
    if (::bind(fd, sa, sizeof addr) < 0 || ::listen(fd, 64) < 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return fail("vsock listener " + path + ": " + e);
    }
  } else if (::connect(fd, sa, sizeof addr) < 0 && errno != EINPROGRESS) {
    std::string e = std::strerror(errno);
    ::close(fd);
    return fail("connect " + path + ": " + e);
  }
  return fd;
}

// Writes all of data to a non-blocking socket, waiting briefly if it is full; false on error.
bool write_all(int fd, const char* data, size_t len) {
  size_t done = 0;
  int spins = 0;
  while (done < len) {
    ssize_t w = ::send(fd, data + done, len - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN && ++spins < 1000) {
      ::usleep(100);  // the peer is slow; the guest's credit bounds how much can pile up
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Vsock>> Vsock::create(uint64_t guest_cid, const std::string& uds_path,
                                             devices::EventLoop* loop) {
  if (guest_cid < 3 || guest_cid > 0xFFFFFFFFull) return fail("vsock guest CID must be 3..2^32-1");
  auto fd = unix_socket(uds_path, true);
  if (!fd) return fail(fd.error());
  std::unique_ptr<Vsock> v(new Vsock(guest_cid, uds_path, loop));
  v->listener_ = kvm::Fd(*fd);
  Vsock* raw = v.get();
  if (auto st = loop->add(*fd, EPOLLIN, [raw](uint32_t) { raw->on_listener(); }); !st)
    return fail(st.error());
  return v;
}

Vsock::~Vsock() {
  if (listener_.valid()) loop_->remove(listener_.get());
  for (auto& [fd, line] : accepting_) {
    loop_->remove(fd);
    ::close(fd);
  }
  for (auto& [k, c] : conns_) {
    loop_->remove(c.fd);
    ::close(c.fd);
  }
  ::unlink(path_.c_str());
}

void Vsock::read_config(uint64_t offset, uint8_t* data, size_t len) {
  uint8_t cfg[8];
  std::memcpy(cfg, &cid_, 8);
  for (size_t i = 0; i < len; ++i) data[i] = offset + i < 8 ? cfg[offset + i] : 0;
}

Status Vsock::activate(const DeviceContext& ctx) {
  ctx_ = ctx;
  active_ = true;
  return {};
}

Status Vsock::reactivate(const DeviceContext& ctx) {
  ctx_ = ctx;
  active_ = true;
  pending_reset_event_ = true;  // delivered once the guest has an event buffer
  send_transport_reset();
  return {};
}

void Vsock::reset() {
  for (auto& [k, c] : conns_) {
    loop_->remove(c.fd);
    ::close(c.fd);
  }
  conns_.clear();
  by_fd_.clear();
  rx_pending_.clear();
  active_ = false;
  ctx_ = {};
}

void Vsock::send_transport_reset() {
  if (!active_ || !pending_reset_event_) return;
  Queue& q = (*ctx_.queues)[2];
  auto chain = q.pop(*ctx_.mem);
  if (!chain || !chain->has_value()) return;
  uint32_t ev = kEventTransportReset;
  uint32_t n = static_cast<uint32_t>((*chain)->write(*ctx_.mem, 0, &ev, sizeof ev));
  if (q.add_used(*ctx_.mem, (*chain)->head, n) && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
  pending_reset_event_ = false;
}

VsockHeader Vsock::reply_header(const Conn& c, uint16_t op) const {
  VsockHeader h{};
  h.src_cid = kVsockHostCid;
  h.dst_cid = cid_;
  h.src_port = c.local_port;
  h.dst_port = c.peer_port;
  h.type = kVsockTypeStream;
  h.op = op;
  h.buf_alloc = kBufAlloc;
  h.fwd_cnt = c.fwd_cnt;
  return h;
}

void Vsock::queue_rx(VsockHeader h, std::string payload) {
  h.len = static_cast<uint32_t>(payload.size());
  if (rx_pending_.size() >= kMaxPendingRx && h.op == kVsockOpRw)
    return;  // readers are paused before this
  rx_pending_.emplace_back(h, std::move(payload));
}

void Vsock::flush_rx() {
  if (!active_) return;
  Queue& q = (*ctx_.queues)[0];
  bool used = false;
  while (!rx_pending_.empty()) {
    auto chain = q.pop(*ctx_.mem);
    if (!chain) {
      ctx_.needs_reset();
      return;
    }
    if (!chain->has_value()) break;  // no rx buffer: wait for the guest's next rx kick
    const Chain& c = **chain;
    auto& [h, payload] = rx_pending_.front();
    if (c.writable_bytes < sizeof(VsockHeader) + payload.size()) {
      // Buffer too small for this packet: give it back empty and drop the packet's data.
      (void)q.add_used(*ctx_.mem, c.head, 0);
      rx_pending_.pop_front();
      used = true;
      continue;
    }
    c.write(*ctx_.mem, 0, &h, sizeof h);
    c.write(*ctx_.mem, sizeof h, payload.data(), payload.size());
    if (!q.add_used(*ctx_.mem, c.head, static_cast<uint32_t>(sizeof h + payload.size()))) {
      ctx_.needs_reset();
      return;
    }
    rx_pending_.pop_front();
    used = true;
  }
  if (used && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
  rearm_readers();
}

void Vsock::rearm_readers() {
  if (rx_pending_.size() >= kMaxPendingRx / 2) return;
  for (auto& [k, c] : conns_) {
    if (!c.reading && c.established) {
      c.reading = true;
      (void)loop_->modify(c.fd, EPOLLIN | EPOLLRDHUP);
    }
  }
}

void Vsock::notify(int queue) {
  if (!active_) return;
  if (queue == 0) {
    flush_rx();
    return;
  }
  if (queue == 2) {
    send_transport_reset();
    return;
  }
  if (queue != 1) return;
  const bool ok_queue = serve_queue(ctx_, 1, [this](const Chain& c) -> uint32_t {
    VsockHeader h{};
    std::string payload;
    bool ok = c.read(*ctx_.mem, 0, &h, sizeof h) == sizeof h;  // copy, then check
    if (ok && h.len > 0) {
      if (h.len > kMaxPacketBytes || h.len > c.readable_bytes - sizeof h) {
        ok = false;
      } else {
        payload.resize(h.len);
        ok = c.read(*ctx_.mem, sizeof h, payload.data(), h.len) == h.len;
      }
    }
    if (ok) handle_tx_packet(h, payload);
    return 0;  // the device wrote nothing into a tx chain
  });
  if (ok_queue) flush_rx();
}

void Vsock::handle_tx_packet(const VsockHeader& h, const std::string& payload) {
  if (h.src_cid != cid_ || h.dst_cid != kVsockHostCid) return;  // spoofed or not for us: drop
  if (h.type != kVsockTypeStream) {
    VsockHeader r{};
    r.src_cid = kVsockHostCid;
    r.dst_cid = cid_;
    r.src_port = h.dst_port;
    r.dst_port = h.src_port;
    r.type = h.type;
    r.op = kVsockOpRst;
    queue_rx(r);
    return;
  }
  Key k{h.dst_port, h.src_port};
  auto it = conns_.find(k);
  if (h.op == kVsockOpRequest) {
    if (it != conns_.end()) return;
    Conn c;
    c.local_port = h.dst_port;
    c.peer_port = h.src_port;
    c.peer_buf_alloc = h.buf_alloc;
    c.peer_fwd_cnt = h.fwd_cnt;
    auto fd = conns_.size() < kMaxConnections
                  ? unix_socket(path_ + "_" + std::to_string(h.dst_port), false)
                  : Result<int>(fail("too many connections"));
    if (!fd) {
      queue_rx(reply_header(c, kVsockOpRst));
      return;
    }
    c.fd = *fd;
    c.established = true;
    conns_[k] = c;
    by_fd_[c.fd] = k;
    int cfd = c.fd;
    (void)loop_->add(cfd, EPOLLIN | EPOLLRDHUP,
                     [this, cfd](uint32_t ev) { on_conn_event(cfd, ev); });
    queue_rx(reply_header(c, kVsockOpResponse));
    return;
  }
  if (it == conns_.end()) {
    if (h.op != kVsockOpRst) {  // unknown connection: tell the guest it is gone
      Conn c;
      c.local_port = h.dst_port;
      c.peer_port = h.src_port;
      queue_rx(reply_header(c, kVsockOpRst));
    }
    return;
  }
  Conn& c = it->second;
  c.peer_buf_alloc = h.buf_alloc;
  c.peer_fwd_cnt = h.fwd_cnt;
  switch (h.op) {
    case kVsockOpResponse:
      if (c.host_initiated && !c.established) {
        c.established = true;
        std::string ok = "OK " + std::to_string(c.local_port) + "\n";
        if (!write_all(c.fd, ok.data(), ok.size())) {
          close_conn(k, true);
          return;
        }
        c.reading = true;
        (void)loop_->modify(c.fd, EPOLLIN | EPOLLRDHUP);
      }
      break;
    case kVsockOpRw:
      if (!c.established) break;
      if (!write_all(c.fd, payload.data(), payload.size())) {
        close_conn(k, true);
        return;
      }
      c.fwd_cnt += static_cast<uint32_t>(payload.size());
      // Tell the guest about freed credit once a good part of the window was consumed.
      if (c.fwd_cnt % (kBufAlloc / 4) < payload.size())
        queue_rx(reply_header(c, kVsockOpCreditUpdate));
      break;
    case kVsockOpCreditRequest:
      queue_rx(reply_header(c, kVsockOpCreditUpdate));
      break;
    case kVsockOpCreditUpdate:
      if (!c.reading) {
        c.reading = true;
        (void)loop_->modify(c.fd, EPOLLIN | EPOLLRDHUP);
      }
      break;
    case kVsockOpShutdown:
      if ((h.flags & (kShutdownRcv | kShutdownSend)) == (kShutdownRcv | kShutdownSend)) {
        close_conn(k, true);  // full shutdown: acknowledge with RST, as Linux expects
      } else if (h.flags & kShutdownSend) {
        ::shutdown(c.fd, SHUT_WR);
      }
      break;
    case kVsockOpRst:
      close_conn(k, false);
      break;
    default:
      break;
  }
}

void Vsock::close_conn(const Key& k, bool send_rst) {
  auto it = conns_.find(k);
  if (it == conns_.end()) return;
  if (send_rst) queue_rx(reply_header(it->second, kVsockOpRst));
  loop_->remove(it->second.fd);
  ::close(it->second.fd);
  by_fd_.erase(it->second.fd);
  conns_.erase(it);
}

void Vsock::on_listener() {
  std::lock_guard lock(*mu_);
  while (true) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (accepting_.size() + conns_.size() >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    accepting_[fd] = "";
    (void)loop_->add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t ev) { on_conn_event(fd, ev); });
  }
}

void Vsock::read_from_host(Conn& c, const Key& k) {
  // Only what the guest's credit allows: peer_buf_alloc - (tx_cnt - peer_fwd_cnt).
  uint32_t in_flight = c.tx_cnt - c.peer_fwd_cnt;
  uint32_t credit = c.peer_buf_alloc > in_flight ? c.peer_buf_alloc - in_flight : 0;
  if (credit == 0 || rx_pending_.size() >= kMaxPendingRx / 2) {
    c.reading = false;
    (void)loop_->modify(c.fd, EPOLLRDHUP);
    if (credit == 0) queue_rx(reply_header(c, kVsockOpCreditRequest));
    return;
  }
  std::string buf(std::min<uint32_t>(credit, 4096), '\0');
  ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
  if (n > 0) {
    buf.resize(static_cast<size_t>(n));
    c.tx_cnt += static_cast<uint32_t>(n);
    queue_rx(reply_header(c, kVsockOpRw), std::move(buf));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    VsockHeader h = reply_header(c, kVsockOpShutdown);
    h.flags = kShutdownRcv | kShutdownSend;
    queue_rx(h);
    loop_->remove(c.fd);
    ::close(c.fd);
    by_fd_.erase(c.fd);
    conns_.erase(k);
  }
}

void Vsock::on_conn_event(int fd, uint32_t events) {
  std::lock_guard lock(*mu_);
  auto acc = accepting_.find(fd);
  if (acc != accepting_.end()) {
    // Host client still sending "CONNECT <port>\n".
    char ch;
    while (::recv(fd, &ch, 1, 0) == 1) {
      acc->second += ch;
      if (ch == '\n' || acc->second.size() > kMaxConnectLine) break;
    }
    std::string line = acc->second;
    bool closed = (events & (EPOLLRDHUP | EPOLLHUP)) != 0;
    if (line.empty() || line.back() != '\n') {
      if (line.size() > kMaxConnectLine || closed) {
        loop_->remove(fd);
        ::close(fd);
        accepting_.erase(acc);
      }
      return;
    }
    accepting_.erase(acc);
    unsigned long port = 0;
    char* end = nullptr;
    if (line.rfind("CONNECT ", 0) != 0 || !active_ ||
        (port = std::strtoul(line.c_str() + 8, &end, 10), end == nullptr || *end != '\n') ||
        port > 0xFFFFFFFFul) {
      loop_->remove(fd);
      ::close(fd);
      return;
    }
    Conn c;
    c.fd = fd;
    c.host_initiated = true;
    c.peer_port = static_cast<uint32_t>(port);
    do {
      c.local_port = next_host_port_++;
      if (next_host_port_ == 0) next_host_port_ = kFirstHostPort;
    } while (conns_.count({c.local_port, c.peer_port}));
    c.reading = false;  // until the guest accepts
    (void)loop_->modify(fd, EPOLLRDHUP);
    Key k{c.local_port, c.peer_port};
    conns_[k] = c;
    by_fd_[fd] = k;
    queue_rx(reply_header(c, kVsockOpRequest));
    flush_rx();
    return;
  }
  auto bf = by_fd_.find(fd);
  if (bf == by_fd_.end()) return;
  Key k = bf->second;
  Conn& c = conns_[k];
  if (!c.established) {
    if (events & (EPOLLRDHUP | EPOLLHUP)) close_conn(k, true);
    flush_rx();
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) read_from_host(c, k);
  flush_rx();
}

}  // namespace cordon::vmm::virtio
