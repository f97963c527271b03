#include "gateway/h2/protocol_cache.h"

namespace cordon::gateway::h2 {

UpstreamProtocol ProtocolCache::get(const std::string& key, uint64_t now_ms) {
  std::lock_guard lk(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return UpstreamProtocol::kUnknown;
  if (now_ms - it->second->at_ms >= ttl_ms_) {
    lru_.erase(it->second);
    index_.erase(it);
    return UpstreamProtocol::kUnknown;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->protocol;
}

void ProtocolCache::put(const std::string& key, UpstreamProtocol protocol, uint64_t now_ms) {
  std::lock_guard lk(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->protocol = protocol;
    it->second->at_ms = now_ms;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  while (lru_.size() >= capacity_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front(Entry{key, protocol, now_ms});
  index_.emplace(key, lru_.begin());
}

size_t ProtocolCache::size() const {
  std::lock_guard lk(mu_);
  return lru_.size();
}

}  // namespace cordon::gateway::h2
