// The vsock packet parser, the connection state machine, and the muxer end to end over fake
// guest memory (a hand-driven virtqueue on each side) with real Unix sockets on the host side.
#include "vmm/devices/virtio/vsock/vsock.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/devices/virtio/mmio.h"

namespace cordon::vmm::virtio {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kCid = 42;

VsockHeader guest_header(uint16_t op, uint32_t src_port, uint32_t dst_port, uint32_t len = 0) {
  VsockHeader h{};
  h.src_cid = kCid;
  h.dst_cid = kVsockHostCid;
  h.src_port = src_port;
  h.dst_port = dst_port;
  h.len = len;
  h.type = kVsockTypeStream;
  h.op = op;
  h.buf_alloc = 64 * 1024;
  return h;
}

std::string bytes_of(const VsockHeader& h, std::string_view payload = {}) {
  std::string s(reinterpret_cast<const char*>(&h), sizeof h);
  s.append(payload);
  return s;
}

// --- packet parser -----------------------------------------------------------------------

TEST(VsockPacket, ParsesHeaderAndPayload) {
  auto p = parse_tx_packet(bytes_of(guest_header(kVsockOpRw, 1000, 5000, 5), "hello"), kCid);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->hdr.op, kVsockOpRw);
  EXPECT_EQ(p->payload, "hello");
  // Trailing bytes past len (a bigger descriptor) are not payload.
  auto q = parse_tx_packet(bytes_of(guest_header(kVsockOpRw, 1, 2, 2), "abcdef"), kCid);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->payload, "ab");
}

TEST(VsockPacket, RefusesMalformedHeaders) {
  auto err = [](const std::string& bytes) {
    auto p = parse_tx_packet(bytes, kCid);
    return p ? std::string() : p.error().message;
  };
  EXPECT_NE(err(std::string(43, '\0')).find("shorter than the 44-byte header"), std::string::npos);
  EXPECT_NE(err(bytes_of(guest_header(kVsockOpRw, 1, 2, 10), "short")).find("only 5 payload"),
            std::string::npos);
  EXPECT_NE(err(bytes_of(guest_header(kVsockOpRw, 1, 2, kVsockMaxPacketBytes + 1))).find("exceeds"),
            std::string::npos);
  VsockHeader spoofed = guest_header(kVsockOpRequest, 1, 2);
  spoofed.src_cid = 7;
  EXPECT_NE(err(bytes_of(spoofed)).find("src_cid 7"), std::string::npos);
  VsockHeader elsewhere = guest_header(kVsockOpRequest, 1, 2);
  elsewhere.dst_cid = 9;
  EXPECT_NE(err(bytes_of(elsewhere)).find("dst_cid 9"), std::string::npos);
  EXPECT_NE(err(bytes_of(guest_header(0, 1, 2))).find("unknown op 0"), std::string::npos);
  EXPECT_NE(err(bytes_of(guest_header(8, 1, 2))).find("unknown op 8"), std::string::npos);
  VsockHeader shut = guest_header(kVsockOpShutdown, 1, 2);
  shut.flags = 4;
  EXPECT_NE(err(bytes_of(shut)).find("SHUTDOWN flags 4"), std::string::npos);
  EXPECT_NE(err(bytes_of(guest_header(kVsockOpRequest, 1, 2, 3), "abc")).find("payload"),
            std::string::npos);
  // A non-stream type is well-formed (the device answers it with RST).
  VsockHeader seq = guest_header(kVsockOpRequest, 1, 2);
  seq.type = 2;
  EXPECT_TRUE(parse_tx_packet(bytes_of(seq), kCid));
}

// --- connection state machine --------------------------------------------------------------

TEST(VsockConnection, CreditFollowsThePeerAndWrapsAround) {
  VsockHeader req = guest_header(kVsockOpRequest, 1, 2);
  req.buf_alloc = 1000;
  req.fwd_cnt = 0xFFFFFFF0u;  // free-running counters near the wrap
  auto c = VsockConnection::from_guest(2, 1, req);
  EXPECT_EQ(c.state(), VsockConnection::State::kEstablished);
  c.sent_to_guest(0xFFFFFFF0u);  // tx_cnt now equals the peer's fwd_cnt
  EXPECT_EQ(c.peer_credit(), 1000u);
  c.sent_to_guest(600);  // wraps past zero
  EXPECT_EQ(c.peer_credit(), 400u);
  EXPECT_TRUE(c.may_read_host());
  c.sent_to_guest(400);
  EXPECT_EQ(c.peer_credit(), 0u);
  EXPECT_FALSE(c.may_read_host());
  EXPECT_TRUE(c.take_credit_request());
  EXPECT_FALSE(c.take_credit_request()) << "one CREDIT_REQUEST per stall";
  VsockHeader upd = req;
  upd.fwd_cnt = 0xFFFFFFF0u + 1000;
  c.update_peer_credit(upd);
  EXPECT_EQ(c.peer_credit(), 1000u);
}

TEST(VsockConnection, GuestBytesAreBoundedByOurBufAlloc) {
  auto c = VsockConnection::from_guest(2, 1, guest_header(kVsockOpRequest, 1, 2));
  std::string quarter(VsockConnection::kBufAlloc / 4, 'x');
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.buffer_from_guest(quarter));
  EXPECT_FALSE(c.buffer_from_guest("y")) << "past buf_alloc: the guest broke the protocol";
  EXPECT_EQ(c.pending_to_host().size(), VsockConnection::kBufAlloc);
  EXPECT_FALSE(c.delivered_to_host(100));
  EXPECT_TRUE(c.delivered_to_host(quarter.size())) << "a quarter window freed: CREDIT_UPDATE";
  c.credit_announced();
  EXPECT_EQ(c.header(kCid, kVsockOpCreditUpdate).fwd_cnt, quarter.size() + 100);
  EXPECT_TRUE(c.buffer_from_guest("y")) << "delivered bytes free space";
}

TEST(VsockConnection, HostInitiatedWaitsForResponseThenExpires) {
  auto t0 = VsockConnection::Clock::now();
  auto c = VsockConnection::from_host(1u << 30, 49983, t0);
  EXPECT_EQ(c.state(), VsockConnection::State::kConnecting);
  EXPECT_FALSE(c.buffer_from_guest("early")) << "no data before RESPONSE";
  EXPECT_FALSE(c.may_read_host());
  EXPECT_FALSE(c.expired(t0 + 1s));
  EXPECT_TRUE(c.expired(t0 + VsockConnection::kRequestTimeout));
  auto d = VsockConnection::from_host(1u << 30, 49983, t0);
  EXPECT_TRUE(d.on_response());
  EXPECT_FALSE(d.on_response()) << "a second RESPONSE is not awaited";
  EXPECT_FALSE(d.expired(t0 + 1h)) << "an established connection has no deadline";
}

TEST(VsockConnection, HandshakeLineIsNotCountedAsGuestBytes) {
  auto c = VsockConnection::from_host(1u << 30, 49990, VsockConnection::Clock::now());
  ASSERT_TRUE(c.on_response());
  c.buffer_for_host_first("OK 1073741824\n");
  ASSERT_TRUE(c.buffer_from_guest("reply"));
  EXPECT_EQ(c.pending_to_host(), "OK 1073741824\nreply");
  c.delivered_to_host(10);
  EXPECT_EQ(c.header(kCid, kVsockOpRw).fwd_cnt, 0u) << "our own line is not the guest's credit";
  c.delivered_to_host(c.pending_to_host().size());
  EXPECT_EQ(c.header(kCid, kVsockOpRw).fwd_cnt, 5u) << "exactly what the guest sent";
}

TEST(VsockConnection, ShutdownAndClosing) {
  auto t0 = VsockConnection::Clock::now();
  auto c = VsockConnection::from_guest(2, 1, guest_header(kVsockOpRequest, 1, 2));
  ASSERT_TRUE(c.buffer_from_guest("tail"));
  c.on_guest_shutdown(kVsockShutdownSend);
  EXPECT_FALSE(c.buffer_from_guest("more")) << "no data after SHUTDOWN SEND";
  EXPECT_FALSE(c.want_host_shutdown_write()) << "the buffered tail goes first";
  EXPECT_FALSE(c.finished());
  c.delivered_to_host(4);
  EXPECT_TRUE(c.want_host_shutdown_write());
  EXPECT_FALSE(c.finished()) << "half-closed: the host may still send";
  c.on_host_eof();
  EXPECT_TRUE(c.finished());
  EXPECT_FALSE(c.may_read_host());

  auto d = VsockConnection::from_guest(2, 1, guest_header(kVsockOpRequest, 1, 2));
  d.start_closing(t0);
  EXPECT_EQ(d.state(), VsockConnection::State::kClosing);
  EXPECT_FALSE(d.buffer_from_guest("x"));
  EXPECT_FALSE(d.expired(t0 + 1s));
  EXPECT_TRUE(d.expired(t0 + VsockConnection::kShutdownTimeout));
}

// --- the muxer over fake guest memory ------------------------------------------------------

// A minimal driver: queue q's rings at 0x10000 * (q + 1), buffers from 0x100000.
class FakeDriver {
 public:
  static constexpr uint16_t kSize = 64;

  explicit FakeDriver(const std::string& uds) : ram_(4 << 20) {
    mem_ = GuestMemory::wrap(ram_.data(), ram_.size());
    auto dev = Vsock::create(kCid, uds, &loop_);
    EXPECT_TRUE(dev) << (dev ? "" : dev.error().message);
    dev_ = dev->get();
    t_ = std::make_unique<MmioTransport>(std::move(*dev), &mem_, [] {});
    dev_->set_lock(&t_->lock());
    wr(0x70, 1);
    wr(0x70, 3);
    wr(0x24, 1);
    wr(0x20, 1);  // VERSION_1
    wr(0x24, 0);
    wr(0x20, 0);
    wr(0x70, 11);
    for (uint32_t q = 0; q < 3; ++q) {
      wr(0x30, q);
      wr(0x38, kSize);
      wr(0x80, ring(q));
      wr(0x90, ring(q) + 0x1000);
      wr(0xA0, ring(q) + 0x2000);
      wr(0x44, 1);
    }
    wr(0x70, 15);
    EXPECT_TRUE(t_->activated());
    EXPECT_TRUE(loop_.start());
  }
  ~FakeDriver() { loop_.stop(); }

  Vsock& dev() { return *dev_; }
  std::mutex& lock() { return t_->lock(); }

  void post_rx(int n, uint32_t size = 4096 + sizeof(VsockHeader)) {
    for (int i = 0; i < n; ++i) add(0, alloc(size), size, /*writable=*/true);
    wr(0x50, 0);
  }
  void send(const VsockHeader& h, std::string_view payload = {}) {
    std::string b = bytes_of(h, payload);
    uint64_t a = alloc(static_cast<uint32_t>(b.size()));
    std::memcpy(ram_.data() + a, b.data(), b.size());
    add(1, a, static_cast<uint32_t>(b.size()), false);
    wr(0x50, 1);
  }
  // Packets the device put in rx buffers since the last call.
  std::vector<VsockPacket> take_rx() {
    std::lock_guard l(t_->lock());
    std::vector<VsockPacket> out;
    uint16_t idx;
    std::memcpy(&idx, ram_.data() + ring(0) + 0x2002, 2);
    for (; used_seen_ != idx; ++used_seen_) {
      uint32_t id, len;
      std::memcpy(&id, ram_.data() + ring(0) + 0x2004 + 8 * (used_seen_ % kSize), 4);
      std::memcpy(&len, ram_.data() + ring(0) + 0x2004 + 8 * (used_seen_ % kSize) + 4, 4);
      uint64_t a;
      std::memcpy(&a, ram_.data() + ring(0) + 16 * id, 8);
      if (len < sizeof(VsockHeader)) continue;
      VsockPacket p;
      std::memcpy(&p.hdr, ram_.data() + a, sizeof p.hdr);
      p.payload.assign(reinterpret_cast<char*>(ram_.data() + a + sizeof p.hdr), p.hdr.len);
      out.push_back(p);
    }
    return out;
  }
  // Waits until a packet with `op` arrives; collects everything seen on the way into `seen`.
  bool wait_rx(uint16_t op, std::vector<VsockPacket>* seen, std::chrono::milliseconds t = 2s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& p : take_rx()) {
        seen->push_back(p);
        if (p.hdr.op == op) return true;
      }
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

 private:
  static uint64_t ring(uint32_t q) { return 0x10000ull * (q + 1); }
  void wr(uint64_t off, uint32_t v) { t_->write(off, reinterpret_cast<uint8_t*>(&v), 4); }
  uint64_t alloc(uint32_t size) {
    uint64_t a = next_buf_;
    next_buf_ += (size + 15) & ~15u;
    if (next_buf_ > ram_.size()) next_buf_ = 0x100000, a = next_buf_, next_buf_ += size;
    return a;
  }
  void add(uint32_t q, uint64_t addr, uint32_t len, bool writable) {
    std::lock_guard l(t_->lock());
    uint16_t& idx = avail_[q];
    uint16_t d = idx % kSize;
    uint8_t* desc = ram_.data() + ring(q) + 16 * d;
    uint16_t flags = writable ? 2 : 0, next = 0;
    std::memcpy(desc, &addr, 8);
    std::memcpy(desc + 8, &len, 4);
    std::memcpy(desc + 12, &flags, 2);
    std::memcpy(desc + 14, &next, 2);
    std::memcpy(ram_.data() + ring(q) + 0x1004 + 2 * d, &d, 2);
    ++idx;
    std::memcpy(ram_.data() + ring(q) + 0x1002, &idx, 2);
  }

  std::vector<uint8_t> ram_;
  GuestMemory mem_ = GuestMemory::wrap(nullptr, 0);
  devices::EventLoop loop_;
  std::unique_ptr<MmioTransport> t_;
  Vsock* dev_ = nullptr;
  uint16_t avail_[3] = {};
  uint16_t used_seen_ = 0;
  uint64_t next_buf_ = 0x100000;
};

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/cordon-vsock-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int listen_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

TEST(VsockMuxer, GuestConnectsToHostAndBytesFlowBothWays) {
  ScratchDir dir;
  const std::string uds = dir.path() + "/v.sock";
  int l = listen_unix(uds + "_5000");
  ASSERT_GE(l, 0);
  FakeDriver g(uds);
  g.post_rx(16);
  g.send(guest_header(kVsockOpRequest, 1234, 5000));
  std::vector<VsockPacket> seen;
  ASSERT_TRUE(g.wait_rx(kVsockOpResponse, &seen));
  EXPECT_EQ(seen.back().hdr.src_port, 5000u);
  EXPECT_EQ(seen.back().hdr.dst_port, 1234u);
  EXPECT_EQ(seen.back().hdr.buf_alloc, Vsock::kBufAlloc);
  int s = ::accept(l, nullptr, nullptr);
  ASSERT_GE(s, 0);
  timeval tv{2, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  g.send(guest_header(kVsockOpRw, 1234, 5000, 5), "hello");
  char buf[16] = {};
  ASSERT_EQ(::recv(s, buf, sizeof buf, 0), 5);
  EXPECT_STREQ(buf, "hello");
  ASSERT_EQ(::send(s, "world", 5, 0), 5);
  seen.clear();
  ASSERT_TRUE(g.wait_rx(kVsockOpRw, &seen));
  EXPECT_EQ(seen.back().payload, "world");
  // The guest closes (SHUTDOWN both): the device answers RST and the host side sees EOF.
  VsockHeader shut = guest_header(kVsockOpShutdown, 1234, 5000);
  shut.flags = kVsockShutdownRcv | kVsockShutdownSend;
  g.send(shut);
  seen.clear();
  ASSERT_TRUE(g.wait_rx(kVsockOpRst, &seen));
  EXPECT_EQ(::recv(s, buf, sizeof buf, 0), 0);
  {
    std::lock_guard lk(g.lock());
    EXPECT_EQ(g.dev().connection_count(), 0u);
  }
  ::close(s);
  ::close(l);
}

TEST(VsockMuxer, UnansweredHostRequestIsResetAndFreed) {
  ScratchDir dir;
  const std::string uds = dir.path() + "/v.sock";
  FakeDriver g(uds);
  g.post_rx(8);
  int c = connect_unix(uds);
  ASSERT_GE(c, 0);
  ASSERT_EQ(::send(c, "CONNECT 49983\n", 14, 0), 14);
  std::vector<VsockPacket> seen;
  ASSERT_TRUE(g.wait_rx(kVsockOpRequest, &seen));
  EXPECT_EQ(seen.back().hdr.dst_port, 49983u);
  EXPECT_EQ(seen.back().hdr.src_port, Vsock::kFirstHostPort);
  {
    std::lock_guard lk(g.lock());
    EXPECT_EQ(g.dev().connection_count(), 1u);
    // The guest never answers: past the request timeout the sweep resets it.
    g.dev().expire(std::chrono::steady_clock::now() + VsockConnection::kRequestTimeout);
    EXPECT_EQ(g.dev().connection_count(), 0u);
  }
  seen.clear();
  ASSERT_TRUE(g.wait_rx(kVsockOpRst, &seen));
  char b;
  EXPECT_EQ(::recv(c, &b, 1, 0), 0) << "the client sees the connection end";
  ::close(c);
}

TEST(VsockMuxer, SlowHostReaderDoesNotBlockAndLosesNothing) {
  ScratchDir dir;
  const std::string uds = dir.path() + "/v.sock";
  FakeDriver g(uds);
  g.post_rx(32);
  int c = connect_unix(uds);
  ASSERT_GE(c, 0);
  int small = 4096;
  ::setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  ASSERT_EQ(::send(c, "CONNECT 7\n", 10, 0), 10);
  std::vector<VsockPacket> seen;
  ASSERT_TRUE(g.wait_rx(kVsockOpRequest, &seen));
  const uint32_t port = seen.back().hdr.src_port;
  g.send(guest_header(kVsockOpResponse, 7, port));
  char line[32] = {};
  for (size_t i = 0; i < sizeof line - 1; ++i) {
    ASSERT_EQ(::recv(c, line + i, 1, 0), 1);
    if (line[i] == '\n') break;
  }
  EXPECT_EQ(std::string(line), "OK " + std::to_string(port) + "\n");
  ASSERT_EQ(::send(c, "x", 1, 0), 1);
  seen.clear();
  ASSERT_TRUE(g.wait_rx(kVsockOpRw, &seen));
  EXPECT_EQ(seen.back().hdr.fwd_cnt, 0u) << "the guest has sent nothing yet";
  // 200 KiB from the guest while the client reads nothing: sends return at once (the bytes
  // wait in the connection's buffer), far more than the socket holds.
  std::string sent;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    std::string chunk(4096, static_cast<char>('a' + i % 26));
    g.send(guest_header(kVsockOpRw, 7, port, 4096), chunk);
    sent += chunk;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  std::string got;
  char buf[8192];
  while (got.size() < sent.size()) {
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "after " << got.size() << " bytes";
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_TRUE(got == sent) << "bytes arrive complete and in order";
  ::close(c);
}

TEST(VsockMuxer, LargeHostDataIsSplitOverSmallRxBuffers) {
  ScratchDir dir;
  const std::string uds = dir.path() + "/v.sock";
  FakeDriver g(uds);
  g.post_rx(4);
  int c = connect_unix(uds);
  ASSERT_GE(c, 0);
  ASSERT_EQ(::send(c, "CONNECT 8\n", 10, 0), 10);
  std::vector<VsockPacket> seen;
  ASSERT_TRUE(g.wait_rx(kVsockOpRequest, &seen));
  const uint32_t port = seen.back().hdr.src_port;
  g.send(guest_header(kVsockOpResponse, 8, port));
  char line[32];
  ASSERT_GT(::recv(c, line, sizeof line, 0), 0);
  const std::string data(3000, 'z');
  ASSERT_EQ(::send(c, data.data(), data.size(), 0), 3000);
  g.post_rx(4, sizeof(VsockHeader) + 1024);  // buffers smaller than what was read
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (got.size() < data.size() && std::chrono::steady_clock::now() < deadline) {
    for (auto& p : g.take_rx())
      if (p.hdr.op == kVsockOpRw) got += p.payload;
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(got, data);
  ::close(c);
}

TEST(VsockMuxer, HostPortsContinueAfterRestore) {
  ScratchDir dir;
  std::string state;
  {
    FakeDriver g(dir.path() + "/a.sock");
    g.post_rx(8);
    int c = connect_unix(dir.path() + "/a.sock");
    ASSERT_EQ(::send(c, "CONNECT 9\n", 10, 0), 10);
    std::vector<VsockPacket> seen;
    ASSERT_TRUE(g.wait_rx(kVsockOpRequest, &seen));
    EXPECT_EQ(seen.back().hdr.src_port, Vsock::kFirstHostPort);
    std::lock_guard lk(g.lock());
    state = g.dev().save_state();
    ::close(c);
  }
  // A clone restored from that state goes on from the next port: the snapshotted guest may still
  // hold a socket for the first one.
  FakeDriver g2(dir.path() + "/b.sock");
  {
    std::lock_guard lk(g2.lock());
    ASSERT_TRUE(g2.dev().restore_state(state));
    EXPECT_FALSE(g2.dev().restore_state("xyz")) << "a truncated state is an error";
  }
  g2.post_rx(8);
  int c = connect_unix(dir.path() + "/b.sock");
  ASSERT_EQ(::send(c, "CONNECT 9\n", 10, 0), 10);
  std::vector<VsockPacket> seen;
  ASSERT_TRUE(g2.wait_rx(kVsockOpRequest, &seen));
  EXPECT_EQ(seen.back().hdr.src_port, Vsock::kFirstHostPort + 1);
  ::close(c);
}

}  // namespace
}  // namespace cordon::vmm::virtio
