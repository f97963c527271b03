// Writes the seed corpus of fuzz_h2_session: a client preface with ordinary requests, a POST
// with a body and trailers, malformed streams, and the flood shapes (rapid reset,
// CONTINUATION, PING). Each file starts with the fuzzer's flag byte.
// Usage: make_h2_session_corpus DIR   (run once; the files are committed)
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gateway/h2/testing/frames.h"

namespace t = cordon::gateway::h2::testing;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::vector<std::pair<std::string, std::string>> files;
  const std::string flags(1, '\x06');  // preface included below; 512-byte chunks
  {
    t::Encoder e;
    std::string b = t::preface() + t::settings_ack();
    b += e.headers(1, t::request("GET", "api.test", "/echo"), true);
    b += e.headers(3, t::request("GET", "api.test", "/other"), true);
    files.emplace_back("two_gets", flags + b);
  }
  {
    t::Encoder e;
    auto req = t::request("POST", "api.test", "/grpc.Service/Method");
    req.push_back({"content-type", "application/grpc"});
    req.push_back({"te", "trailers"});
    std::string b = t::preface() + e.headers(1, req, false);
    b += t::data(1, std::string("\0\0\0\0\5hello", 10), false);
    b += e.headers(1, {{"x-trailer", "1"}}, true);
    files.emplace_back("grpc_post_trailers", flags + b);
  }
  {
    t::Encoder e;
    auto req = t::request("POST", "api.test", "/up");
    req.push_back({"content-length", "3"});
    std::string b = t::preface() + e.headers(1, req, false) + t::data(1, "abcd", true);
    auto bad = t::request("GET", "api.test", "/");
    bad.push_back({"connection", "close"});
    b += e.headers(3, bad, true);
    auto dup = t::request("GET", "api.test", "/");
    dup.push_back({":path", "/x"});
    b += e.headers(5, dup, true);
    files.emplace_back("malformed", flags + b);
  }
  {
    t::Encoder e;
    std::string b = t::preface();
    for (int32_t id = 1; id < 80; id += 2) {
      b += e.headers(id, t::request("GET", "api.test", "/"), false);
      b += t::rst_stream(id, 8);
    }
    files.emplace_back("rapid_reset", flags + b);
  }
  {
    t::Encoder e;
    std::string block = e.block(t::request("GET", "api.test", "/"));
    std::string b = t::preface() + t::frame(t::kHeaders, t::kEndStream, 1, block.substr(0, 5));
    for (int i = 0; i < 20; ++i) b += t::frame(t::kContinuation, 0, 1, "");
    files.emplace_back("continuation_flood", flags + b);
  }
  {
    std::string b = t::preface();
    for (int i = 0; i < 50; ++i) b += t::ping();
    files.emplace_back("ping_flood", std::string(1, '\x02') + b);
  }
  files.emplace_back("no_preface", std::string(1, '\x01') + t::ping() + t::window_update(0, 100));
  for (const auto& [name, bytes] : files) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  }
  return 0;
}
