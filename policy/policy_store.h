// PolicyStore: the one place the gateway gets its policy from. Load → lint → compile →
// atomic swap. Readers take an immutable snapshot (shared_ptr<const Policy>) per connection
// or per request and keep using it even if a reload happens meanwhile; the old policy is
// freed when its last reader lets go.
//
// Promises:
//  * A file that fails to read or lint never replaces the current policy; the errors are
//    returned so the caller can report and audit them (design.md §3).
//  * Before the first successful load, snapshot() is nullptr: callers must fail closed.
//  * Every successful load gets the next generation number (1, 2, ...), stamped on the
//    Policy (Policy::generation()) before it is published.
//  * Thread-safe: any number of readers, loads serialized among themselves.
//
// Per-sandbox overlays (design.md §8) are separate objects (policy::Overlay) held by the
// sandbox and passed to each query; they survive reloads because they never refer into a
// Policy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace cordon::policy {

struct LoadOutcome {
  bool replaced = false;           // true: the new policy is live
  std::uint64_t generation = 0;    // generation live after the call
  std::vector<Diagnostic> errors;  // why it was refused (empty when replaced)
  std::string errors_text() const;
};

class PolicyStore {
 public:
  PolicyStore() = default;

  LoadOutcome load_file(const std::string& path);
  LoadOutcome load_text(std::string_view yaml_text, std::string_view file_name);

  std::shared_ptr<const Policy> snapshot() const {
    return current_.load(std::memory_order_acquire);
  }
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  LoadOutcome install(std::shared_ptr<Policy> policy, std::vector<Diagnostic> errors);

  std::mutex load_mutex_;  // serializes loads so generations are published in order
  std::atomic<std::shared_ptr<const Policy>> current_;
  std::atomic<std::uint64_t> generation_{0};
};

}  // namespace cordon::policy
