#include "policy/policy_store.h"

namespace cordon::policy {

namespace detail {
std::pair<std::shared_ptr<Policy>, std::vector<Diagnostic>> compile(std::string_view text,
                                                                    std::string_view file_name);
std::pair<std::shared_ptr<Policy>, std::vector<Diagnostic>> compile_file(const std::string& path);
}  // namespace detail

std::string LoadOutcome::errors_text() const {
  std::string out;
  for (const auto& d : errors) out += d.to_string() + "\n";
  return out;
}

LoadOutcome PolicyStore::load_file(const std::string& path) {
  auto [policy, errors] = detail::compile_file(path);  // compile outside the lock
  return install(std::move(policy), std::move(errors));
}

LoadOutcome PolicyStore::load_text(std::string_view yaml_text, std::string_view file_name) {
  auto [policy, errors] = detail::compile(yaml_text, file_name);
  return install(std::move(policy), std::move(errors));
}

LoadOutcome PolicyStore::install(std::shared_ptr<Policy> policy, std::vector<Diagnostic> errors) {
  std::lock_guard<std::mutex> lock(load_mutex_);
  LoadOutcome out;
  if (!policy) {
    out.errors = std::move(errors);
    out.generation = generation_.load(std::memory_order_acquire);
    return out;
  }
  const std::uint64_t next = generation_.load(std::memory_order_relaxed) + 1;
  policy->generation_ = next;  // not yet shared: no reader can see this write
  current_.store(std::shared_ptr<const Policy>(std::move(policy)), std::memory_order_release);
  generation_.store(next, std::memory_order_release);
  out.replaced = true;
  out.generation = next;
  return out;
}

}  // namespace cordon::policy
