// UpstreamPool: see gateway/detail/impl.h.
#include <algorithm>
#include <utility>

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

void UpstreamPool::configure(size_t max_total, size_t max_per_key, uint32_t idle_timeout_ms,
                             std::atomic<int64_t>* gauge) {
  max_total_ = std::max<size_t>(1, max_total);
  max_per_key_ = std::max<size_t>(1, max_per_key);
  idle_timeout_ms_ = idle_timeout_ms;
  gauge_ = gauge;
}

void UpstreamPool::update_gauge() {
  if (!gauge_) return;
  auto now = static_cast<int64_t>(lru_.size());
  *gauge_ += now - reported_;
  reported_ = now;
}

std::unique_ptr<UpstreamConn> UpstreamPool::unlink(Iter it) {
  auto k = by_key_.find(it->conn->key);
  if (k != by_key_.end()) {
    auto& v = k->second;
    v.erase(std::find(v.begin(), v.end(), it));
    // No empty entries: a key costs memory only while it has idle connections.
    if (v.empty()) by_key_.erase(k);
  }
  by_id_.erase(it->id);
  std::unique_ptr<UpstreamConn> conn = std::move(it->conn);
  lru_.erase(it);
  update_gauge();
  return conn;
}

void UpstreamPool::drop(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;  // taken or dropped meanwhile
  unlink(it->second);              // the connection closes as it is destroyed here
}

void UpstreamPool::watch(Entry& e) {
  // Readable while idle means the upstream closed (EOF, CLOSE-WAIT on our side), reset, or sent
  // bytes nobody asked for: in each case the connection cannot be reused, so it goes now, not
  // when its name is next used. Cancelled (operation_aborted) when taken or closed.
  uint64_t id = e.id;
  e.conn->stream->socket().async_wait(tcp::socket::wait_read, [this, id](error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    drop(id);
  });
}

std::unique_ptr<UpstreamConn> UpstreamPool::take(const std::string& key, Clock::time_point now) {
  auto k = by_key_.find(key);
  while (k != by_key_.end()) {
    Iter it = k->second.back();
    bool fresh = now - it->conn->idle_since < std::chrono::milliseconds(idle_timeout_ms_);
    std::unique_ptr<UpstreamConn> conn = unlink(it);
    error_code ec;
    conn->stream->socket().cancel(ec);  // ends the watch
    if (fresh) return conn;
    k = by_key_.find(key);  // unlink may have erased the entry
  }
  return nullptr;
}

void UpstreamPool::put(std::unique_ptr<UpstreamConn> conn, Clock::time_point now) {
  conn->idle_since = now;
  auto& of_key = by_key_[conn->key];
  if (of_key.size() >= max_per_key_) unlink(of_key.front());  // the key's least recent
  if (lru_.size() >= max_total_) unlink(std::prev(lru_.end()));
  lru_.push_front(Entry{std::move(conn), next_id_++});
  Iter it = lru_.begin();
  by_key_[it->conn->key].push_back(it);  // (the reference above may be gone: unlink erases)
  by_id_.emplace(it->id, it);
  update_gauge();
  watch(*it);
}

void UpstreamPool::sweep(Clock::time_point now) {
  auto timeout = std::chrono::milliseconds(idle_timeout_ms_);
  while (!lru_.empty() && now - lru_.back().conn->idle_since >= timeout) {
    unlink(std::prev(lru_.end()));
  }
}

void UpstreamPool::clear() {
  while (!lru_.empty()) unlink(lru_.begin());
}

}  // namespace cordon::gateway::detail
