// virtio-vsock (device 19) with the host side as Unix sockets, Firecracker's mapping:
//  - host -> guest: a client connects to `uds_path`, writes "CONNECT <port>\n"; the device sends
//    the guest a REQUEST from (CID 2, a fresh host port from 2^30) and, on the guest's RESPONSE,
//    answers "OK <hostport>\n"; then bytes flow both ways.
//  - guest -> host: a REQUEST to (CID 2, port P) connects to the listener `<uds_path>_P`; no
//    listener means RST.
// This file is the muxer: Unix sockets, the event loop and the three queues. Packet checks are
// in packet.h, the per-connection rules (credit, shutdown, deadlines) in connection.h.
//
// Trust: the guest's packets are parsed from a scatter list (header and payload may share or
// split descriptors) and checked (packet.h); the Unix-socket clients are local and trusted as
// much as the socket's file mode allows, but their CONNECT line is bounded in size and time.
// Nothing here blocks: bytes for a slow Unix client wait in the connection's buffer, which the
// guest's credit bounds (kBufAlloc), and a guest that never answers a REQUEST or never finishes a
// SHUTDOWN is reset after a bound. Every table is bounded (kMaxConnections, kMaxPendingRx).
// Snapshot: connections do not survive (like Firecracker); the guest gets a TRANSPORT_RESET
// event after restore, listeners survive. The next host port is saved, so a clone never reuses a
// port the snapshotted guest may still hold a socket for.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "vmm/devices/event_loop.h"
#include "vmm/devices/virtio/device.h"
#include "vmm/devices/virtio/vsock/connection.h"
#include "vmm/devices/virtio/vsock/packet.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm::virtio {

class Vsock : public Device {
 public:
  static constexpr uint32_t kMaxPacketBytes = kVsockMaxPacketBytes;
  static constexpr uint32_t kBufAlloc = VsockConnection::kBufAlloc;
  // Packets waiting for rx buffers: reading host sockets pauses at half, control packets beyond
  // the whole are dropped (a guest that posts no rx buffers but keeps sending).
  static constexpr size_t kMaxPendingRx = 256;
  static constexpr size_t kMaxConnections = 1024;  // established + handshaking + CONNECT lines
  static constexpr size_t kMaxConnectLine = 32;    // "CONNECT 4294967295\n"
  static constexpr uint32_t kFirstHostPort = 1u << 30;
  static constexpr uint32_t kReadChunk = 4096;  // one guest rx buffer in Linux's driver
  static constexpr auto kConnectLineTimeout = std::chrono::seconds(5);

  static Result<std::unique_ptr<Vsock>> create(uint64_t guest_cid, const std::string& uds_path,
                                               devices::EventLoop* loop);
  ~Vsock() override;
  void set_lock(std::mutex* mu) { mu_ = mu; }

  uint32_t device_id() const override { return kDeviceVsock; }
  uint64_t features() const override { return 0; }
  int num_queues() const override { return 3; }
  void read_config(uint64_t offset, uint8_t* data, size_t len) override;
  Status activate(const DeviceContext& ctx) override;
  void notify(int queue) override;
  void reset() override;
  std::string save_state() const override;
  Status restore_state(const std::string& bytes) override;
  Status reactivate(const DeviceContext& ctx) override;

  // For tests and status: live connections and packets waiting for rx buffers.
  size_t connection_count() const { return conns_.size(); }
  size_t pending_rx() const { return rx_pending_.size(); }
  // The periodic sweep (the timer calls it, tests too, with the transport lock held): expired
  // handshakes, closings and CONNECT lines are reset and freed.
  void expire(VsockConnection::Clock::time_point now);

 private:
  using Key = std::pair<uint32_t, uint32_t>;  // (local_port, peer_port)
  struct Conn {
    VsockConnection state;
    int fd = -1;
    uint32_t armed = 0;  // epoll interest now registered
  };
  struct Accepting {
    std::string line;
    VsockConnection::Clock::time_point since;
  };

  Vsock(uint64_t cid, std::string path, devices::EventLoop* loop)
      : cid_(cid), path_(std::move(path)), loop_(loop) {}
  void on_listener();
  void on_timer();
  void on_conn_event(int fd, uint32_t events);
  void on_connect_line(int fd, uint32_t events);
  void handle_tx_packet(const VsockPacket& p);
  void handle_request(const VsockHeader& h);
  // Queues a packet for the guest; false when the queue is full (the packet is dropped).
  bool queue_rx(VsockHeader h, std::string payload = {});
  void queue_for(Conn& c, uint16_t op, uint32_t flags = 0);
  void reset_peer(const VsockHeader& h);
  void flush_rx();
  void read_from_host(Conn& c);
  void write_to_host(const Key& k);
  void after_change(const Key& k);  // closes what is finished, re-arms epoll
  void rearm(Conn& c);
  void close_conn(const Key& k, bool send_rst);
  void client_gone(const Key& k, Conn& c);
  void close_fd(Conn& c);
  void send_transport_reset();

  uint64_t cid_;
  std::string path_;
  devices::EventLoop* loop_;
  std::mutex* mu_ = nullptr;  // the transport's lock
  kvm::Fd listener_;
  kvm::Fd timer_;
  DeviceContext ctx_;
  bool active_ = false;
  std::map<Key, Conn> conns_;
  std::map<int, Key> by_fd_;
  std::map<int, Accepting> accepting_;  // host clients still sending their CONNECT line
  std::deque<std::pair<VsockHeader, std::string>> rx_pending_;
  uint32_t next_host_port_ = kFirstHostPort;
  bool pending_reset_event_ = false;
};

}  // namespace cordon::vmm::virtio
