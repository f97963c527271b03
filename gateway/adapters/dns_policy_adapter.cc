#include "gateway/adapters/dns_policy_adapter.h"

namespace cordon::gateway::adapters {
namespace {

class PolicyDns final : public DnsPolicy {
 public:
  explicit PolicyDns(std::shared_ptr<const policy::Policy> p) : p_(std::move(p)) {}
  bool host_reachable(std::string_view profile, std::string_view host) const override {
    return p_->host_reachable(profile, host);
  }
  bool unlisted_refused() const override {
    return p_->dns_unlisted() == policy::DnsUnlisted::kRefused;
  }

 private:
  std::shared_ptr<const policy::Policy> p_;
};

}  // namespace

std::shared_ptr<const DnsPolicy> make_dns_policy(std::shared_ptr<const policy::Policy> policy) {
  return std::make_shared<PolicyDns>(std::move(policy));
}

}  // namespace cordon::gateway::adapters
