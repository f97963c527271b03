// A token bucket: `per_second` tokens a second up to `burst`, full at the start. The caller
// passes the time in (steady clock), so that tests drive it without sleeping and callers that
// already read the clock do not read it twice. Not thread-safe: guard it with the owner's lock.
#pragma once

#include <algorithm>
#include <chrono>

namespace cordon {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // per_second <= 0: unlimited (take() is always true). burst < 1 is raised to 1.
  TokenBucket(double per_second, double burst, Clock::time_point now)
      : rate_(per_second), burst_(std::max(1.0, burst)), tokens_(burst_), refilled_(now) {}

  bool unlimited() const { return rate_ <= 0; }

  // Takes one token if there is one (after refilling for the time since the last call).
  bool take(Clock::time_point now) {
    if (unlimited()) return true;
    refill(now);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

  // Gives back `n` tokens, never above the burst.
  void credit(double n) { tokens_ = std::min(burst_, tokens_ + n); }

  // True when the bucket is full, i.e. indistinguishable from a new one.
  bool full(Clock::time_point now) {
    if (unlimited()) return true;
    refill(now);
    return tokens_ >= burst_;
  }

 private:
  void refill(Clock::time_point now) {
    if (now <= refilled_) return;
    double dt = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(burst_, tokens_ + dt * rate_);
    refilled_ = now;
  }

  double rate_;
  double burst_;
  double tokens_;
  Clock::time_point refilled_;
};

}  // namespace cordon
