// virtio-vsock (device 19) with the host side as Unix sockets, Firecracker's mapping:
//  - host -> guest: a client connects to `uds_path`, writes "CONNECT <port>\n"; the device sends
//    the guest a REQUEST from (CID 2, a fresh host port from 2^30) and, on the guest's RESPONSE,
//    answers "OK <hostport>\n"; then bytes flow both ways.
//  - guest -> host: a REQUEST to (CID 2, port P) connects to the listener `<uds_path>_P`; no
//    listener means RST.
// Trust: the guest's packets are parsed from a scatter list (header and payload may share or
// split descriptors), lengths capped (kMaxPacketBytes); the Unix-socket clients are local and
// trusted as much as the socket's file mode allows, but their CONNECT line is still bounded.
// Credit: the guest may have at most kBufAlloc bytes in flight towards us; we only send it what
// its advertised credit allows.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "vmm/devices/event_loop.h"
#include "vmm/devices/virtio/device.h"
#include "vmm/kvm/kvm.h"

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

class Vsock : public Device {
 public:
  static constexpr uint32_t kMaxPacketBytes = 64 * 1024;  // Firecracker's maximum buffer
  static constexpr uint32_t kBufAlloc = 256 * 1024;       // what we tell the guest we can hold
  static constexpr size_t kMaxPendingRx = 256;            // packets waiting for rx buffers
  static constexpr size_t kMaxConnections = 1024;
  static constexpr size_t kMaxConnectLine = 32;  // "CONNECT 4294967295\n"
  static constexpr uint32_t kFirstHostPort = 1u << 30;

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
  // Snapshot: connections do not survive (like Firecracker); the guest gets a TRANSPORT_RESET
  // event after restore, listeners survive.
  Status reactivate(const DeviceContext& ctx) override;

 private:
  struct Conn {
    int fd = -1;
    uint32_t local_port = 0;  // host side
    uint32_t peer_port = 0;   // guest side
    bool established = false;
    bool host_initiated = false;
    uint32_t peer_buf_alloc = 0, peer_fwd_cnt = 0;
    uint32_t tx_cnt = 0;   // bytes we sent to the guest
    uint32_t fwd_cnt = 0;  // bytes we delivered to the Unix socket
    bool reading = true;   // EPOLLIN armed
  };
  using Key = std::pair<uint32_t, uint32_t>;  // (local_port, peer_port)

  Vsock(uint64_t cid, std::string path, devices::EventLoop* loop)
      : cid_(cid), path_(std::move(path)), loop_(loop) {}
  void on_listener();
  void on_conn_event(int fd, uint32_t events);
  void handle_tx_packet(const VsockHeader& h, const std::string& payload);
  void queue_rx(VsockHeader h, std::string payload = {});
  void flush_rx();
  void close_conn(const Key& k, bool send_rst);
  VsockHeader reply_header(const Conn& c, uint16_t op) const;
  void read_from_host(Conn& c, const Key& k);
  void rearm_readers();
  void send_transport_reset();

  uint64_t cid_;
  std::string path_;
  devices::EventLoop* loop_;
  std::mutex* mu_ = nullptr;  // the transport's lock
  kvm::Fd listener_;
  DeviceContext ctx_;
  bool active_ = false;
  std::map<Key, Conn> conns_;
  std::map<int, Key> by_fd_;
  std::map<int, std::string> accepting_;  // host clients still sending their CONNECT line
  std::deque<std::pair<VsockHeader, std::string>> rx_pending_;
  uint32_t next_host_port_ = kFirstHostPort;
  bool pending_reset_event_ = false;
};

}  // namespace cordon::vmm::virtio
