// Confinement through serve's steering control socket and the vault; see the header.
#include "sandbox/manager/steering_client_confinement.h"

#include <mutex>

#include "sandbox/steering_service.h"
#include "vault/vault.h"

namespace cordon::sandbox {
namespace {

bool is_default(const NetworkOverlay& n) {
  return n.allow_out.empty() && n.deny_out.empty() && n.internet;
}

class SteeringClientConfinement final : public Confinement {
 public:
  explicit SteeringClientConfinement(StateDir state) : state_(std::move(state)) {}

  Status attach(const std::string& sandbox_id, const std::string& host_interface,
                const std::string& ipv4, const std::string& ipv6) override {
    return steering_attach(state_.steering_socket(),
                           Attachment{sandbox_id, host_interface, ipv4, ipv6});
  }

  Status detach(const std::string& host_interface) override {
    return steering_detach(state_.steering_socket(), host_interface);
  }

  Status register_sandbox(const SandboxRecord& r) override {
    if (!is_default(r.network))
      return fail("sandbox " + r.id +
                  ": network overlays need the gateway's own confinement (cordon serve)");
    auto v = vault();
    if (!v) return fail(v.error());
    // Replace: adoption after a restart registers again.
    (void)(*v)->unregister_sandbox(r.id);
    auto reg = (*v)->register_sandbox(r.id, r.profile, r.address);
    if (!reg) return fail(reg.error());
    return {};
  }

  Status update_network(const std::string& sandbox_id, const NetworkOverlay& n) override {
    if (!is_default(n))
      return fail("sandbox " + sandbox_id +
                  ": network overlays need the gateway's own confinement (cordon serve)");
    return {};
  }

  Status unregister_sandbox(const std::string& sandbox_id) override {
    auto v = vault();
    if (!v) return fail(v.error());
    auto st = (*v)->unregister_sandbox(sandbox_id);
    if (!st && st.error().code != vault::code(vault::ErrorCode::kNotFound)) return st;
    return {};
  }

 private:
  Result<vault::Vault*> vault() {
    std::lock_guard lk(mu_);
    if (!vault_) {
      auto v = vault::Vault::open(state_);
      if (!v) return fail(v.error());
      vault_ = std::move(*v);
    }
    return vault_.get();
  }

  StateDir state_;
  std::mutex mu_;
  std::unique_ptr<vault::Vault> vault_;
};

}  // namespace

std::shared_ptr<Confinement> make_steering_client_confinement(const StateDir& state) {
  return std::make_shared<SteeringClientConfinement>(state);
}

}  // namespace cordon::sandbox
