#include "server/confinement.h"

#include "e2b/network.h"

namespace cordon::server {

namespace {

class FilterOverlay final : public gateway::SandboxOverlay {
 public:
  explicit FilterOverlay(std::shared_ptr<const e2b::NetworkFilter> f) : f_(std::move(f)) {}
  bool permits(std::string_view host) const override { return f_->permits(host); }

 private:
  std::shared_ptr<const e2b::NetworkFilter> f_;
};

class InProcessConfinement final : public sandbox::Confinement {
 public:
  InProcessConfinement(sandbox::SteeringService* s, std::shared_ptr<vault::Vault> v,
                       std::shared_ptr<gateway::adapters::SandboxOverlays> o)
      : steering_(s), vault_(std::move(v)), overlays_(std::move(o)) {}

  Status attach(const std::string& id, const std::string& interface, const std::string& ipv4,
                const std::string& ipv6) override {
    if (!steering_)
      return fail("cannot confine sandbox " + id +
                  ": serve runs without --steering, so its interface would be open");
    return steering_->attach(sandbox::Attachment{id, interface, ipv4, ipv6});
  }
  Status detach(const std::string& interface) override {
    if (!steering_) return {};
    return steering_->detach(interface);
  }
  Status register_sandbox(const sandbox::SandboxRecord& r) override {
    auto o = gateway_overlay(r.network);
    if (!o) return fail(o.error());
    overlays_->set(r.id, *o);  // before the vault knows it: its first request is narrowed
    std::optional<std::string_view> addr;
    if (!r.address.empty()) addr = r.address;
    (void)vault_->unregister_sandbox(r.id);  // a resumed or adopted sandbox registers again
    auto reg = vault_->register_sandbox(r.id, r.profile, addr);
    if (!reg) {
      overlays_->erase(r.id);
      return fail(reg.error());
    }
    return {};
  }
  Status update_network(const std::string& id, const sandbox::NetworkOverlay& n) override {
    auto o = gateway_overlay(n);
    if (!o) return fail(o.error());
    // Its change listener (server.cc) ends the open connections the new overlay refuses.
    overlays_->set(id, *o);
    return {};
  }
  Status unregister_sandbox(const std::string& id) override {
    overlays_->erase(id);
    auto s = vault_->unregister_sandbox(id);
    if (!s && s.error().code != vault::code(vault::ErrorCode::kNotFound)) return s;
    return {};
  }

 private:
  sandbox::SteeringService* steering_;
  std::shared_ptr<vault::Vault> vault_;
  std::shared_ptr<gateway::adapters::SandboxOverlays> overlays_;
};

}  // namespace

Result<std::shared_ptr<const gateway::SandboxOverlay>> gateway_overlay(
    const sandbox::NetworkOverlay& n) {
  auto f = e2b::NetworkFilter::compile(n);
  if (!f) return fail(f.error());
  if ((*f)->open()) return std::shared_ptr<const gateway::SandboxOverlay>();
  return std::shared_ptr<const gateway::SandboxOverlay>(std::make_shared<FilterOverlay>(*f));
}

std::shared_ptr<sandbox::Confinement> make_confinement(
    sandbox::SteeringService* steering, std::shared_ptr<vault::Vault> vault,
    std::shared_ptr<gateway::adapters::SandboxOverlays> overlays) {
  return std::make_shared<InProcessConfinement>(steering, std::move(vault), std::move(overlays));
}

}  // namespace cordon::server
