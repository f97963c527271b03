// A sandbox's E2B network settings (`network.allowOut/denyOut`, `allow_internet_access`) as a
// narrowing of its profile (design.md §8): whatever they say, a host the profile refuses stays
// refused. Semantics follow E2B's: an allowOut entry takes precedence over denyOut, and allowOut
// alone restricts nothing; "0.0.0.0/0" (E2B's ALL_TRAFFIC) in denyOut denies every host that
// allowOut does not name; allow_internet_access:false lets nothing out at all.
//
// Entries are host patterns in the rules file's syntax ("api.x.com", "*.x.com", "**.x.com").
// Address ranges other than 0.0.0.0/0 and ::/0 are refused: the gateway connects by name (it
// resolves the SNI itself), so an IP entry could not be honoured as written.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "policy/policy.h"
#include "sandbox/manager/manager.h"

namespace cordon::e2b {

// `network` (may be null/absent) and `allow_internet_access` (nullopt = absent) of a request
// body → the overlay. Errors name the entry: "network.denyOut[2] '1.2.3.0/24': ...".
Result<sandbox::NetworkOverlay> network_overlay(const nlohmann::json* network,
                                                std::optional<bool> allow_internet_access);

// True when "0.0.0.0/0" or "::/0".
bool is_all_traffic(std::string_view entry);

// The compiled overlay: immutable, thread-safe.
class NetworkFilter {
 public:
  static Result<std::shared_ptr<const NetworkFilter>> compile(const sandbox::NetworkOverlay& n);
  // Whether a connection or request to `host` may go on (after the profile allowed it).
  bool permits(std::string_view host) const;
  // True when it permits every host (no narrowing at all).
  bool open() const { return internet_ && !deny_all_ && !deny_; }

 private:
  bool internet_ = true;
  bool deny_all_ = false;
  std::shared_ptr<const policy::Overlay> allow_;  // nullptr: no allowOut hosts
  std::shared_ptr<const policy::Overlay> deny_;   // nullptr: no denyOut hosts
};

}  // namespace cordon::e2b
