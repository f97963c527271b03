// FakeExchange: an in-memory http::Exchange for handler tests (files, filesystem, process).
// The request body is served in pieces of a chosen size (to exercise every split); the
// response is recorded. Thread-safe, so that a test can watch a streaming handler that runs on
// another thread and then make the "client" leave. Header-only; tests only.
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "agent/http/exchange.h"

namespace cordon::agent::testing {

class FakeExchange : public http::Exchange {
 public:
  explicit FakeExchange(http::RequestHead head, std::string body = {}, size_t piece = 65536)
      : head_(std::move(head)), body_(std::move(body)), piece_(std::max<size_t>(piece, 1)) {}

  const http::RequestHead& head() const override { return head_; }

  Result<size_t> read_body(char* buf, size_t n) override {
    std::lock_guard lock(mu_);
    if (fail_body_at_ && pos_ >= *fail_body_at_) return fail("client went away");
    size_t k = std::min({n, piece_, body_.size() - pos_});
    std::copy_n(body_.data() + pos_, k, buf);
    pos_ += k;
    return k;
  }

  Status respond(int status, const http::Headers& headers, std::string_view body) override {
    std::lock_guard lock(mu_);
    if (responded_) return fail("response already sent");
    responded_ = true;
    status_ = status;
    headers_ = headers;
    body_out_ = std::string(body);
    cv_.notify_all();
    return {};
  }
  Status begin_stream(int status, const http::Headers& headers) override {
    std::lock_guard lock(mu_);
    if (responded_) return fail("response already sent");
    responded_ = streaming_ = true;
    status_ = status;
    headers_ = headers;
    cv_.notify_all();
    return {};
  }
  Status write(std::string_view piece) override {
    if (write_delay_.count() > 0) std::this_thread::sleep_for(write_delay_);
    std::lock_guard lock(mu_);
    if (gone_) return fail("client gone");
    if (!streaming_ || ended_) return fail("write outside a stream");
    body_out_.append(piece);
    ++writes_;
    cv_.notify_all();
    return {};
  }
  Status end_stream() override {
    std::lock_guard lock(mu_);
    if (!streaming_ || ended_) return fail("end_stream outside a stream");
    ended_ = true;
    cv_.notify_all();
    return {};
  }
  bool client_gone() override {
    std::lock_guard lock(mu_);
    return gone_;
  }
  bool wait_client_gone(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return gone_; });
  }

  // --- test controls --------------------------------------------------------------------
  void leave() {
    std::lock_guard lock(mu_);
    gone_ = true;
    cv_.notify_all();
  }
  void fail_body_at(size_t offset) { fail_body_at_ = offset; }
  void set_write_delay(std::chrono::microseconds d) { write_delay_ = d; }
  // Waits until `pred(body so far)` holds or the timeout passes; returns whether it held.
  bool wait_body(const std::function<bool(const std::string&)>& pred,
                 std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(body_out_); });
  }

  // Waits until end_stream() was called.
  bool wait_ended(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ended_; });
  }

  int status() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  std::string body() const {
    std::lock_guard lock(mu_);
    return body_out_;
  }
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  bool streamed() const {
    std::lock_guard lock(mu_);
    return streaming_;
  }
  size_t writes() const {
    std::lock_guard lock(mu_);
    return writes_;
  }
  std::string response_header(std::string_view name) const {
    std::lock_guard lock(mu_);
    for (auto& [k, v] : headers_) {
      if (k.size() != name.size()) continue;
      if (std::equal(k.begin(), k.end(), name.begin(),
                     [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
        return v;
    }
    return {};
  }
  size_t body_read() const {
    std::lock_guard lock(mu_);
    return pos_;
  }

 private:
  http::RequestHead head_;
  std::string body_;
  size_t piece_;
  size_t pos_ = 0;
  std::optional<size_t> fail_body_at_;
  std::chrono::microseconds write_delay_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool responded_ = false, streaming_ = false, ended_ = false, gone_ = false;
  int status_ = 0;
  http::Headers headers_;
  std::string body_out_;
  size_t writes_ = 0;
};

}  // namespace cordon::agent::testing
