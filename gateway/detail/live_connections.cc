#include "gateway/detail/live_connections.h"

#include <algorithm>
#include <boost/asio/post.hpp>

namespace cordon::gateway::detail {

void LiveConnection::set_destination(std::string_view host, uint16_t port) {
  std::lock_guard lk(mu_);
  dest_ = Destination{std::string(host), port};
}

std::optional<LiveConnection::Destination> LiveConnection::destination() const {
  std::lock_guard lk(mu_);
  return dest_;
}

void LiveConnection::close() {
  // The entry is kept alive by the posted handler; the connection itself may end before it
  // runs, which remove() records on the same thread.
  boost::asio::post(ex_, [self = shared_from_this()] {
    if (!self->ended_ && self->close_hook_) self->close_hook_();
  });
}

std::shared_ptr<LiveConnection> ConnectionRegistry::open(const SandboxInfo& sandbox,
                                                         std::string src,
                                                         boost::asio::any_io_executor ex,
                                                         std::function<void()> close_hook) {
  auto conn = std::make_shared<LiveConnection>(sandbox, std::move(src), std::move(ex),
                                               std::move(close_hook));
  std::lock_guard lk(mu_);
  auto& list = by_sandbox_[sandbox.id];
  if (list.size() >= max_per_sandbox_) {
    if (list.empty()) by_sandbox_.erase(sandbox.id);
    return nullptr;
  }
  list.push_back(conn);
  return conn;
}

void ConnectionRegistry::remove(const std::shared_ptr<LiveConnection>& conn) {
  if (!conn) return;
  conn->mark_ended();
  std::lock_guard lk(mu_);
  auto it = by_sandbox_.find(conn->sandbox().id);
  if (it == by_sandbox_.end()) return;
  auto& list = it->second;
  auto pos = std::find(list.begin(), list.end(), conn);
  if (pos != list.end()) {
    // Order does not matter: swap with the last one.
    std::swap(*pos, list.back());
    list.pop_back();
  }
  if (list.empty()) by_sandbox_.erase(it);
}

std::vector<std::shared_ptr<LiveConnection>> ConnectionRegistry::of(
    std::string_view sandbox_id) const {
  std::lock_guard lk(mu_);
  auto it = by_sandbox_.find(std::string(sandbox_id));
  if (it == by_sandbox_.end()) return {};
  return it->second;
}

size_t ConnectionRegistry::count(std::string_view sandbox_id) const {
  std::lock_guard lk(mu_);
  auto it = by_sandbox_.find(std::string(sandbox_id));
  return it == by_sandbox_.end() ? 0 : it->second.size();
}

}  // namespace cordon::gateway::detail
