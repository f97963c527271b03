// Which protocol each upstream (scheme://host:port) chose by ALPN when the gateway offered h2:
// asked before connecting, so that an upstream known to speak only HTTP/1.1 is served from the
// HTTP/1.1 pool at once, and one known to speak h2 gets one multiplexed connection. Bounded
// (least recently used dropped past `capacity`) and aged: an entry older than `ttl_ms` is
// forgotten, so an upstream that starts offering h2 (or stops) is probed again. Thread-safe
// (every io thread asks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

namespace cordon::gateway::h2 {

enum class UpstreamProtocol { kUnknown, kHttp1, kH2 };

class ProtocolCache {
 public:
  explicit ProtocolCache(size_t capacity = 1024, uint64_t ttl_ms = 10 * 60 * 1000)
      : capacity_(capacity == 0 ? 1 : capacity), ttl_ms_(ttl_ms) {}

  UpstreamProtocol get(const std::string& key, uint64_t now_ms);
  void put(const std::string& key, UpstreamProtocol protocol, uint64_t now_ms);
  size_t size() const;

 private:
  struct Entry {
    std::string key;
    UpstreamProtocol protocol;
    uint64_t at_ms;
  };
  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t ttl_ms_;
  std::list<Entry> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace cordon::gateway::h2
