#include "server/manager_service.h"

namespace cordon::server {

namespace {

class ManagerService final : public e2b::SandboxService {
 public:
  explicit ManagerService(std::shared_ptr<sandbox::Manager> m) : m_(std::move(m)) {}
  Result<sandbox::SandboxRecord> create(const sandbox::CreateSpec& s) override {
    return m_->create(s);
  }
  Result<sandbox::SandboxRecord> get(std::string_view id) const override { return m_->get(id); }
  std::vector<sandbox::SandboxRecord> list() const override { return m_->list(); }
  Status kill(std::string_view id) override { return m_->kill(id); }
  Status pause(std::string_view id) override { return m_->pause(id); }
  Status resume(std::string_view id) override { return m_->resume(id); }
  Status set_timeout(std::string_view id, std::chrono::seconds t) override {
    return m_->set_timeout(id, t);
  }
  Status set_network(std::string_view id, const sandbox::NetworkOverlay& n) override {
    return m_->set_network(id, n);
  }
  Result<sandbox::SandboxMetrics> metrics(std::string_view id) const override {
    return m_->metrics(id);
  }
  Result<int> connect_agent(std::string_view id) const override { return m_->connect_agent(id); }

 private:
  std::shared_ptr<sandbox::Manager> m_;
};

}  // namespace

std::shared_ptr<e2b::SandboxService> make_manager_service(std::shared_ptr<sandbox::Manager> m) {
  return std::make_shared<ManagerService>(std::move(m));
}

}  // namespace cordon::server
