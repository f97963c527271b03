// Adapter from a policy snapshot (policy/) to the DNS responder's DnsPolicy port. Translates
// and nothing else: which names a profile reaches is the policy's decision.
#pragma once

#include <memory>

#include "gateway/dns_responder.h"
#include "policy/policy.h"

namespace cordon::gateway::adapters {

std::shared_ptr<const DnsPolicy> make_dns_policy(std::shared_ptr<const policy::Policy> policy);

}  // namespace cordon::gateway::adapters
