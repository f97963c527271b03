// The registry of open client connections per sandbox: it enforces
// Limits::max_connections_per_sandbox (an entry is the connection's slot) and lets a change of a
// sandbox's overlay reach the connections already open (Gateway::end_refused_connections): each
// entry knows the host the connection talks to and how to end it on its own io thread.
//
// Bounded: a sandbox has at most the per-sandbox limit of entries, and an entry lives exactly as
// long as its connection (the session's guard removes it). The registry's lock is held only to
// add, remove and copy entries, never across I/O or a call into a port.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gateway/ports.h"

namespace cordon::gateway::detail {

// One open client connection of a sandbox. Created by ConnectionRegistry::open; its fields
// other than the destination are fixed from then on.
class LiveConnection : public std::enable_shared_from_this<LiveConnection> {
 public:
  struct Destination {
    std::string host;  // lower-case, no port: the SNI, CONNECT host or the request's host
    uint16_t port = 0;
  };

  LiveConnection(SandboxInfo sandbox, std::string src, boost::asio::any_io_executor ex,
                 std::function<void()> close_hook)
      : sandbox_(std::move(sandbox)),
        src_(std::move(src)),
        ex_(std::move(ex)),
        close_hook_(std::move(close_hook)) {}

  const SandboxInfo& sandbox() const { return sandbox_; }
  const std::string& src() const { return src_; }  // the client's ip:port
  // Where the connection goes, as soon as the session knows it (before it checks the host
  // against the overlay, so that a change made in between is not missed). Thread-safe.
  void set_destination(std::string_view host, uint16_t port);
  // nullopt until set_destination.
  std::optional<Destination> destination() const;
  // True for the first caller only: the connection is to be ended once, audited once.
  bool claim_cut() { return !cut_.exchange(true); }
  bool cut() const { return cut_.load(); }
  // From any thread: runs the close hook on the connection's io thread, unless the connection
  // has ended by then (the hook must then not run: what it closes is gone).
  void close();
  // Called on the connection's io thread as it ends (by the registry's remove).
  void mark_ended() { ended_ = true; }

 private:
  const SandboxInfo sandbox_;
  const std::string src_;
  const boost::asio::any_io_executor ex_;
  const std::function<void()> close_hook_;
  mutable std::mutex mu_;
  std::optional<Destination> dest_;
  std::atomic<bool> cut_{false};
  // Written and read on the connection's io thread only (remove and the posted close).
  bool ended_ = false;
};

class ConnectionRegistry {
 public:
  explicit ConnectionRegistry(uint32_t max_per_sandbox) : max_per_sandbox_(max_per_sandbox) {}

  // A new entry for a connection of `sandbox` from `src` whose io thread is `ex`; `close_hook`
  // ends it (run on that thread). Null when the sandbox has max_per_sandbox connections open.
  std::shared_ptr<LiveConnection> open(const SandboxInfo& sandbox, std::string src,
                                       boost::asio::any_io_executor ex,
                                       std::function<void()> close_hook);
  // Removes the entry; call on the connection's io thread as the connection ends.
  void remove(const std::shared_ptr<LiveConnection>& conn);
  // The sandbox's open connections now (a copy: the caller may do I/O with it).
  std::vector<std::shared_ptr<LiveConnection>> of(std::string_view sandbox_id) const;
  size_t count(std::string_view sandbox_id) const;

 private:
  const uint32_t max_per_sandbox_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<LiveConnection>>> by_sandbox_;
};

}  // namespace cordon::gateway::detail
