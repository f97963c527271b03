// The gateway's blocking pool: a few threads for the calls an io thread must not make (vault
// lookups that would read SQLite: a cache miss, a due change check). An io coroutine
// `co_await`s run(fn): fn runs on a pool thread while the io thread serves other connections,
// and the coroutine resumes on its own executor (its io thread) with fn's result.
//
// Owns: its threads. Trusts: the functions it is given (cordon's own ports), which must not
// throw (they return Results) and must be thread-safe. A coroutine suspended in run() stays
// alive until fn has returned (the job holds its completion handler), so fn may use references
// into the coroutine's frame. Shutdown order: stop and join the io threads, then join() this
// pool (results still in flight are posted to the stopped io_contexts and destroyed with
// them), then destroy the io_contexts.
#pragma once

#include <atomic>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace cordon::gateway::detail {

// Two threads: a miss costs tens of µs (unbounded only on a sick disk, where more threads would
// not help: the vault serializes its reads on one connection), and a second thread keeps one
// slow read from delaying an unrelated fetch behind it.
inline constexpr unsigned kBlockingPoolThreads = 2;

class BlockingPool {
 public:
  explicit BlockingPool(unsigned threads = kBlockingPoolThreads) : pool_(threads) {}
  ~BlockingPool() { join(); }
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Runs fn() on a pool thread; the awaiting coroutine resumes on its own executor.
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&>> run(F fn) {
    using R = std::invoke_result_t<F&>;
    jobs_.fetch_add(1, std::memory_order_relaxed);
    auto initiate = [this](auto handler, F f) {
      // The coroutine's own executor: its io thread.
      auto home = boost::asio::get_associated_executor(handler);
      boost::asio::post(pool_, [handler = std::move(handler), f = std::move(f), home]() mutable {
        R result = f();
        boost::asio::post(home,
                          [handler = std::move(handler), result = std::move(result)]() mutable {
                            std::move(handler)(std::move(result));
                          });
      });
    };
    co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&, void(R)>(
        initiate, boost::asio::use_awaitable, std::move(fn));
  }

  // Waits until every queued and running job has finished. Idempotent.
  void join() { pool_.join(); }

  // Jobs submitted so far (tests and metrics).
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }

 private:
  boost::asio::thread_pool pool_;
  std::atomic<uint64_t> jobs_{0};
};

}  // namespace cordon::gateway::detail
