// The API's blocking pool: threads for the calls an io thread must not make (the API-key check
// on a cache miss, every sandbox-manager call, connecting to an agent). An io coroutine
// `co_await`s run(fn): fn runs on a pool thread and the coroutine resumes on its own executor
// with the result. Bounded: at most `max_jobs` queued or running; beyond that run() answers
// nullopt at once (the caller answers 429 with Retry-After) instead of queueing without end.
//
// A coroutine suspended in run() stays alive until fn has returned (the job holds its
// completion handler). Shutdown: stop and join the io threads, then join() this pool, then
// destroy the io_contexts (results still in flight are posted to the stopped contexts).
#pragma once

#include <atomic>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

namespace cordon::e2b::detail {

class BlockingPool {
 public:
  BlockingPool(unsigned threads, size_t max_jobs) : pool_(threads), max_jobs_(max_jobs) {}
  ~BlockingPool() { join(); }
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Runs fn() on a pool thread, or answers nullopt at once when max_jobs are in flight.
  template <class F>
  boost::asio::awaitable<std::optional<std::invoke_result_t<F&>>> run(F fn) {
    using R = std::invoke_result_t<F&>;
    if (in_flight_.fetch_add(1, std::memory_order_acq_rel) >= max_jobs_) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      co_return std::nullopt;
    }
    auto initiate = [this](auto handler, F f) {
      auto home = boost::asio::get_associated_executor(handler);
      boost::asio::post(
          pool_, [this, handler = std::move(handler), f = std::move(f), home]() mutable {
            R result = f();
            in_flight_.fetch_sub(1, std::memory_order_acq_rel);
            boost::asio::post(home,
                              [handler = std::move(handler), result = std::move(result)]() mutable {
                                std::move(handler)(std::move(result));
                              });
          });
    };
    R r = co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&, void(R)>(
        initiate, boost::asio::use_awaitable, std::move(fn));
    co_return std::optional<R>(std::move(r));
  }

  void join() { pool_.join(); }
  size_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

 private:
  boost::asio::thread_pool pool_;
  size_t max_jobs_;
  std::atomic<size_t> in_flight_{0};
};

}  // namespace cordon::e2b::detail
