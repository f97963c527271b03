#include "e2b/network.h"

#include <string>
#include <vector>

#include "e2b/wire.h"

namespace cordon::e2b {

namespace {

bool looks_like_address(std::string_view s) {
  // Digits, dots, colons and a slash only: an IP or CIDR, never a host name (a host name
  // always has a letter in its last label, which the host-pattern parser checks as well).
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= '0' && c <= '9') || c == '.' || c == ':' || c == '/' ||
              (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!ok) return false;
  }
  return s.find_first_of(":/") != std::string_view::npos ||
         s.find_first_not_of("0123456789.") == std::string_view::npos;
}

Status read_list(const nlohmann::json& network, const char* key, std::vector<std::string>* out,
                 size_t* total) {
  auto it = network.find(key);
  if (it == network.end() || it->is_null()) return {};
  if (!it->is_array())
    return fail(std::string("network.") + key + ": expected an array of host patterns");
  size_t i = 0;
  for (const auto& e : *it) {
    std::string where = std::string("network.") + key + "[" + std::to_string(i++) + "]";
    if (!e.is_string()) return fail(where + ": expected a string");
    std::string v = e.get<std::string>();
    if (++*total > kMaxNetworkEntries)
      return fail(std::string("network: more than ") + std::to_string(kMaxNetworkEntries) +
                  " allowOut/denyOut entries");
    if (is_all_traffic(v)) {
      out->push_back(v);
      continue;
    }
    if (looks_like_address(v))
      return fail(where + " '" + v +
                  "': address ranges other than 0.0.0.0/0 are not supported (the gateway "
                  "connects by host name): name the hosts instead");
    auto one = std::string(key) == "allowOut" ? policy::Overlay::compile({v}, {})
                                              : policy::Overlay::compile({}, {v});
    if (!one) return fail(where + " '" + v + "': not a host pattern (" + one.error().message + ")");
    out->push_back(v);
  }
  return {};
}

}  // namespace

bool is_all_traffic(std::string_view entry) {
  return entry == "0.0.0.0/0" || entry == "::/0";
}

Result<sandbox::NetworkOverlay> network_overlay(const nlohmann::json* network,
                                                std::optional<bool> allow_internet_access) {
  sandbox::NetworkOverlay n;
  n.internet = allow_internet_access.value_or(true);
  if (network == nullptr || network->is_null()) return n;
  if (!network->is_object()) return fail("network: expected an object");
  size_t total = 0;
  if (auto s = read_list(*network, "allowOut", &n.allow_out, &total); !s) return fail(s.error());
  if (auto s = read_list(*network, "denyOut", &n.deny_out, &total); !s) return fail(s.error());
  for (const auto& a : n.allow_out) {
    if (is_all_traffic(a))
      return fail("network.allowOut '" + a +
                  "': allowing all traffic widens nothing; leave allowOut out instead");
  }
  return n;
}

Result<std::shared_ptr<const NetworkFilter>> NetworkFilter::compile(
    const sandbox::NetworkOverlay& n) {
  auto f = std::make_shared<NetworkFilter>();
  f->internet_ = n.internet;
  std::vector<std::string> allow, deny;
  for (const auto& a : n.allow_out) allow.push_back(a);
  for (const auto& d : n.deny_out) {
    if (is_all_traffic(d))
      f->deny_all_ = true;
    else
      deny.push_back(d);
  }
  if (!allow.empty()) {
    auto o = policy::Overlay::compile(allow, {});
    if (!o) return fail(o.error());
    f->allow_ = *o;
  }
  if (!deny.empty()) {
    auto o = policy::Overlay::compile({}, deny);
    if (!o) return fail(o.error());
    f->deny_ = *o;
  }
  return std::shared_ptr<const NetworkFilter>(std::move(f));
}

bool NetworkFilter::permits(std::string_view host) const {
  if (!internet_) return false;
  if (allow_ && allow_->permits(host)) return true;  // allowOut takes precedence
  if (deny_all_) return false;
  return !deny_ || deny_->permits(host);
}

}  // namespace cordon::e2b
