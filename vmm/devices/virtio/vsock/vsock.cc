#include "vmm/devices/virtio/vsock/vsock.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "vmm/snapshot/bytes.h"

namespace cordon::vmm::virtio {
namespace {

using Clock = VsockConnection::Clock;
// How often expired handshakes and closings are looked for; the deadlines are 2 s and more.
constexpr long kSweepNanos = 500'000'000;

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
  } else if (::connect(fd, sa, sizeof addr) < 0) {
    // A non-blocking Unix connect completes at once or fails (EAGAIN: the listener's backlog
    // is full); either way there is nothing to wait for.
    std::string e = std::strerror(errno);
    ::close(fd);
    return fail("connect " + path + ": " + e);
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<Vsock>> Vsock::create(uint64_t guest_cid, const std::string& uds_path,
                                             devices::EventLoop* loop) {
  if (guest_cid < 3 || guest_cid > 0xFFFFFFFFull) return fail("vsock guest CID must be 3..2^32-1");
  auto fd = unix_socket(uds_path, true);
  if (!fd) return fail(fd.error());
  std::unique_ptr<Vsock> v(new Vsock(guest_cid, uds_path, loop));
  v->listener_ = kvm::Fd(*fd);
  // The sweep timer is created and armed here, before any seccomp filter: the event thread
  // only reads it.
  v->timer_ = kvm::Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!v->timer_.valid()) return fail(std::string("vsock timerfd: ") + std::strerror(errno));
  itimerspec period{};
  period.it_interval.tv_nsec = kSweepNanos;
  period.it_value.tv_nsec = kSweepNanos;
  if (::timerfd_settime(v->timer_.get(), 0, &period, nullptr) != 0)
    return fail(std::string("vsock timerfd_settime: ") + std::strerror(errno));
  Vsock* raw = v.get();
  if (auto st = loop->add(*fd, EPOLLIN, [raw](uint32_t) { raw->on_listener(); }); !st)
    return fail(st.error());
  if (auto st = loop->add(v->timer_.get(), EPOLLIN, [raw](uint32_t) { raw->on_timer(); }); !st)
    return fail(st.error());
  return v;
}

Vsock::~Vsock() {
  if (listener_.valid()) loop_->remove(listener_.get());
  if (timer_.valid()) loop_->remove(timer_.get());
  for (auto& [fd, a] : accepting_) {
    loop_->remove(fd);
    ::close(fd);
  }
  for (auto& [k, c] : conns_) close_fd(c);
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
  for (auto& [k, c] : conns_) close_fd(c);
  conns_.clear();
  by_fd_.clear();
  rx_pending_.clear();
  active_ = false;
  pending_reset_event_ = false;
  ctx_ = {};
}

std::string Vsock::save_state() const {
  snapshot::Writer w;
  w.u32(next_host_port_);
  return w.take();
}

Status Vsock::restore_state(const std::string& bytes) {
  if (bytes.empty()) return {};  // a snapshot from before the port was saved
  snapshot::Reader r(bytes);
  uint32_t port = r.u32();
  if (!r.ok() || !r.at_end()) return fail("vsock state: truncated or trailing bytes");
  next_host_port_ = port >= kFirstHostPort ? port : kFirstHostPort;
  return {};
}

void Vsock::send_transport_reset() {
  if (!active_ || !pending_reset_event_) return;
  Queue& q = (*ctx_.queues)[2];
  auto chain = q.pop(*ctx_.mem);
  if (!chain) {
    ctx_.needs_reset();
    return;
  }
  if (!chain->has_value()) return;
  uint32_t ev = kVsockEventTransportReset;
  uint32_t n = static_cast<uint32_t>((*chain)->write(*ctx_.mem, 0, &ev, sizeof ev));
  if (q.add_used(*ctx_.mem, (*chain)->head, n) && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
  pending_reset_event_ = false;
}

bool Vsock::queue_rx(VsockHeader h, std::string payload) {
  h.len = static_cast<uint32_t>(payload.size());
  // Data stops being read at kMaxPendingRx / 2 (rearm), so RW fits below kMaxPendingRx; control
  // packets may use the rest, one or two per connection at a time.
  const size_t limit = h.op == kVsockOpRw ? kMaxPendingRx : kMaxPendingRx + kMaxConnections;
  if (rx_pending_.size() >= limit) return false;
  rx_pending_.emplace_back(h, std::move(payload));
  return true;
}

void Vsock::queue_for(Conn& c, uint16_t op, uint32_t flags) {
  VsockHeader h = c.state.header(cid_, op);
  h.flags = flags;
  if (queue_rx(h)) c.state.credit_announced();
}

void Vsock::reset_peer(const VsockHeader& h) {
  VsockHeader r{};
  r.src_cid = kVsockHostCid;
  r.dst_cid = cid_;
  r.src_port = h.dst_port;
  r.dst_port = h.src_port;
  r.type = h.type;
  r.op = kVsockOpRst;
  queue_rx(r);
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
    used = true;
    if (c.writable_bytes < sizeof(VsockHeader)) {
      // Not even a header fits: hand the buffer back empty, the packet waits for the next one.
      if (!q.add_used(*ctx_.mem, c.head, 0)) {
        ctx_.needs_reset();
        return;
      }
      continue;
    }
    auto& [h, payload] = rx_pending_.front();
    // Data larger than the buffer is split over several (only RW carries any): nothing of the
    // stream is dropped, whatever buffer size the driver chose.
    const size_t n = std::min<uint64_t>(payload.size(), c.writable_bytes - sizeof(VsockHeader));
    VsockHeader out = h;
    out.len = static_cast<uint32_t>(n);
    c.write(*ctx_.mem, 0, &out, sizeof out);
    c.write(*ctx_.mem, sizeof out, payload.data(), n);
    if (!q.add_used(*ctx_.mem, c.head, static_cast<uint32_t>(sizeof out + n))) {
      ctx_.needs_reset();
      return;
    }
    if (n < payload.size())
      payload.erase(0, n);
    else
      rx_pending_.pop_front();
  }
  if (used && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
  if (rx_pending_.size() < kMaxPendingRx / 2)
    for (auto& [k, c] : conns_) rearm(c);
}

void Vsock::rearm(Conn& c) {
  if (c.fd < 0) return;
  uint32_t want = 0;
  // EPOLLRDHUP only while reading: a half-closed client we do not read would wake us forever.
  if (c.state.may_read_host() && rx_pending_.size() < kMaxPendingRx / 2)
    want |= EPOLLIN | EPOLLRDHUP;
  if (!c.state.pending_to_host().empty()) want |= EPOLLOUT;
  if (want != c.armed) {
    (void)loop_->modify(c.fd, want);
    c.armed = want;
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
    VsockPacket p;
    // Copy the header, then check it; a packet that fails is dropped (Linux does the same
    // with what it cannot parse), the queue goes on.
    if (c.read(*ctx_.mem, 0, &p.hdr, sizeof p.hdr) != sizeof p.hdr) return 0;
    if (!check_tx_header(p.hdr, c.readable_bytes, cid_)) return 0;
    if (p.hdr.len > 0) {
      p.payload.resize(p.hdr.len);
      if (c.read(*ctx_.mem, sizeof p.hdr, p.payload.data(), p.hdr.len) != p.hdr.len) return 0;
    }
    handle_tx_packet(p);
    return 0;  // the device wrote nothing into a tx chain
  });
  if (ok_queue) flush_rx();
}

void Vsock::handle_request(const VsockHeader& h) {
  if (conns_.size() + accepting_.size() >= kMaxConnections) {
    reset_peer(h);
    return;
  }
  auto fd = unix_socket(path_ + "_" + std::to_string(h.dst_port), false);
  if (!fd) {
    reset_peer(h);
    return;
  }
  Key k{h.dst_port, h.src_port};
  Conn& c = conns_.emplace(k, Conn{VsockConnection::from_guest(h.dst_port, h.src_port, h), *fd})
                .first->second;
  by_fd_[*fd] = k;
  const int cfd = *fd;
  (void)loop_->add(cfd, 0, [this, cfd](uint32_t ev) { on_conn_event(cfd, ev); });
  queue_for(c, kVsockOpResponse);
  rearm(c);
}

void Vsock::handle_tx_packet(const VsockPacket& p) {
  const VsockHeader& h = p.hdr;
  if (h.type != kVsockTypeStream) {
    reset_peer(h);
    return;
  }
  Key k{h.dst_port, h.src_port};
  auto it = conns_.find(k);
  if (h.op == kVsockOpRequest) {
    if (it == conns_.end()) handle_request(h);
    return;  // a second REQUEST for a live connection is ignored, as Linux does
  }
  if (it == conns_.end()) {
    if (h.op != kVsockOpRst) reset_peer(h);  // unknown connection: tell the guest it is gone
    return;
  }
  Conn& c = it->second;
  c.state.update_peer_credit(h);
  switch (h.op) {
    case kVsockOpResponse:
      if (!c.state.on_response()) {
        close_conn(k, true);
        return;
      }
      c.state.buffer_for_host_first("OK " + std::to_string(c.state.local_port()) + "\n");
      break;
    case kVsockOpRw:
      if (!c.state.buffer_from_guest(p.payload)) {
        close_conn(k, true);  // over our credit, before RESPONSE, after SHUTDOWN, or closing
        return;
      }
      break;
    case kVsockOpCreditRequest:
      queue_for(c, kVsockOpCreditUpdate);
      break;
    case kVsockOpCreditUpdate:
      break;  // the credit was taken above; after_change re-arms reading
    case kVsockOpShutdown:
      if (c.state.state() == VsockConnection::State::kClosing) {
        close_conn(k, true);  // both sides are done: the RST the guest waits for
        return;
      }
      c.state.on_guest_shutdown(h.flags);
      break;
    case kVsockOpRst:
      close_conn(k, false);
      return;
    default:
      break;
  }
  write_to_host(k);
  after_change(k);
}

void Vsock::write_to_host(const Key& k) {
  auto it = conns_.find(k);
  if (it == conns_.end() || it->second.fd < 0) return;
  Conn& c = it->second;
  while (!c.state.pending_to_host().empty()) {
    std::string_view data = c.state.pending_to_host();
    ssize_t w = ::send(c.fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      if (c.state.delivered_to_host(static_cast<size_t>(w))) queue_for(c, kVsockOpCreditUpdate);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT resumes it
    // The client is gone: what the guest sent cannot be delivered.
    client_gone(k, c);
    return;
  }
}

void Vsock::after_change(const Key& k) {
  auto it = conns_.find(k);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  if (c.state.state() != VsockConnection::State::kEstablished) {
    rearm(c);
    return;
  }
  if (c.fd >= 0 && c.state.want_host_shutdown_write()) (void)::shutdown(c.fd, SHUT_WR);
  if (c.state.finished()) {
    close_conn(k, true);  // Linux's close waits for our RST
    return;
  }
  if (c.state.take_credit_request()) queue_for(c, kVsockOpCreditRequest);
  rearm(c);
}

void Vsock::read_from_host(Conn& c) {
  if (!c.state.may_read_host() || rx_pending_.size() >= kMaxPendingRx / 2) return;
  std::string buf(std::min<uint32_t>(c.state.peer_credit(), kReadChunk), '\0');
  ssize_t n = ::recv(c.fd, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n > 0) {
    buf.resize(static_cast<size_t>(n));
    c.state.sent_to_guest(static_cast<uint32_t>(n));
    if (queue_rx(c.state.header(cid_, kVsockOpRw), std::move(buf))) c.state.credit_announced();
  } else if (n == 0) {
    // The client finished writing; it may still read what the guest answers.
    c.state.on_host_eof();
    queue_for(c, kVsockOpShutdown, kVsockShutdownSend);
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    queue_for(c, kVsockOpShutdown, kVsockShutdownRcv | kVsockShutdownSend);
    close_fd(c);
    c.state.start_closing(Clock::now());
  }
}

// The Unix client is gone: a handshake still pending is reset; an open connection is shut
// down towards the guest and closes once the guest acknowledges (or its deadline passes).
void Vsock::client_gone(const Key& k, Conn& c) {
  if (c.state.state() == VsockConnection::State::kConnecting) {
    close_conn(k, true);
  } else {
    queue_for(c, kVsockOpShutdown, kVsockShutdownRcv | kVsockShutdownSend);
    close_fd(c);
    c.state.start_closing(Clock::now());
  }
}

void Vsock::close_fd(Conn& c) {
  if (c.fd < 0) return;
  loop_->remove(c.fd);
  ::close(c.fd);
  by_fd_.erase(c.fd);
  c.fd = -1;
  c.armed = 0;
}

void Vsock::close_conn(const Key& k, bool send_rst) {
  auto it = conns_.find(k);
  if (it == conns_.end()) return;
  if (send_rst) queue_for(it->second, kVsockOpRst);
  close_fd(it->second);
  conns_.erase(it);
}

void Vsock::expire(Clock::time_point now) {
  std::vector<Key> expired;
  for (auto& [k, c] : conns_)
    if (c.state.expired(now)) expired.push_back(k);
  // A REQUEST the guest never answered, or a SHUTDOWN it never finished: RST, state freed.
  for (const auto& k : expired) close_conn(k, true);
  for (auto it = accepting_.begin(); it != accepting_.end();) {
    if (now - it->second.since >= kConnectLineTimeout) {
      loop_->remove(it->first);
      ::close(it->first);
      it = accepting_.erase(it);
    } else {
      ++it;
    }
  }
  flush_rx();
}

void Vsock::on_timer() {
  std::lock_guard lock(*mu_);
  uint64_t ticks;
  (void)!::read(timer_.get(), &ticks, sizeof ticks);
  expire(Clock::now());
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
    accepting_[fd] = Accepting{"", Clock::now()};
    (void)loop_->add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t ev) { on_conn_event(fd, ev); });
  }
}

void Vsock::on_connect_line(int fd, uint32_t events) {
  auto acc = accepting_.find(fd);
  // Byte by byte: nothing past the newline may be consumed, it belongs to the guest's stream.
  char ch;
  while (acc->second.line.size() <= kMaxConnectLine && ::recv(fd, &ch, 1, MSG_DONTWAIT) == 1) {
    acc->second.line += ch;
    if (ch == '\n') break;
  }
  const std::string line = acc->second.line;
  const bool closed = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
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
  const auto peer = static_cast<uint32_t>(port);
  uint32_t local;
  do {
    local = next_host_port_++;
    if (next_host_port_ == 0) next_host_port_ = kFirstHostPort;
  } while (conns_.count({local, peer}));
  Key k{local, peer};
  Conn& c = conns_.emplace(k, Conn{VsockConnection::from_host(local, peer, Clock::now()), fd})
                .first->second;
  c.armed = EPOLLIN | EPOLLRDHUP;  // as on_listener registered it
  by_fd_[fd] = k;
  queue_for(c, kVsockOpRequest);
  rearm(c);  // nothing is read until the guest accepts; a hang-up still wakes us
}

void Vsock::on_conn_event(int fd, uint32_t events) {
  std::lock_guard lock(*mu_);
  if (accepting_.count(fd)) {
    on_connect_line(fd, events);
    flush_rx();
    return;
  }
  auto bf = by_fd_.find(fd);
  if (bf == by_fd_.end()) return;
  const Key k = bf->second;
  Conn& c = conns_.at(k);
  if (events & (EPOLLHUP | EPOLLERR)) {
    // The client closed both directions: nothing can reach it any more.
    client_gone(k, c);
    flush_rx();
    return;
  }
  if (events & EPOLLOUT) write_to_host(k);
  auto it = conns_.find(k);
  if (it != conns_.end() && it->second.fd >= 0 && (events & (EPOLLIN | EPOLLRDHUP)))
    read_from_host(it->second);
  after_change(k);
  flush_rx();
}

}  // namespace cordon::vmm::virtio
