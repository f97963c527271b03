// Blocking agent client; see agent_client.h.
#include "sandbox/manager/agent_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/encoding.h"

namespace cordon::sandbox {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class Conn {
 public:
  Conn(int fd, int timeout_ms, std::function<bool()> alive = {})
      : fd_(fd),
        deadline_(Clock::now() + std::chrono::milliseconds(timeout_ms)),
        alive_(std::move(alive)) {}
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }

  Status send_all(std::string_view data) {
    while (!data.empty()) {
      if (auto st = wait(POLLOUT); !st) return st;
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return fail(std::string("agent: send: ") + strerror(errno));
      data.remove_prefix(static_cast<size_t>(n));
    }
    return {};
  }

  // Appends what arrives to buf_; false at EOF.
  Result<bool> fill() {
    if (auto st = wait(POLLIN); !st) return fail(st.error());
    char tmp[16384];
    while (true) {
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n < 0) return fail(std::string("agent: recv: ") + strerror(errno));
      if (n == 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  // Reads the status line and headers. Returns the status code.
  Result<int> read_head() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (buf_.size() > kMaxAgentHeaderBytes) return fail("agent: response head too large");
      auto r = fill();
      if (!r) return fail(r.error());
      if (!*r) return fail("agent: connection closed before the response head");
    }
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    if (head.compare(0, 9, "HTTP/1.1 ") != 0 && head.compare(0, 9, "HTTP/1.0 ") != 0)
      return fail("agent: not an HTTP response");
    int status = atoi(head.c_str() + 9);
    std::string lower;
    for (char c : head) lower += static_cast<char>(tolower(static_cast<unsigned char>(c)));
    chunked_ = lower.find("\r\ntransfer-encoding: chunked") != std::string::npos;
    auto cl = lower.find("\r\ncontent-length:");
    if (cl != std::string::npos) length_ = std::strtoll(lower.c_str() + cl + 17, nullptr, 10);
    return status;
  }

  // Reads the next piece of the body into `out`; false when the body is complete.
  Result<bool> read_body(std::string* out) {
    if (!chunked_) {
      if (length_ == 0) return false;
      if (buf_.empty()) {
        auto r = fill();
        if (!r) return fail(r.error());
        if (!*r) {
          if (length_ > 0) return fail("agent: body cut short");
          return false;
        }
      }
      size_t take = length_ < 0 ? buf_.size() : std::min<size_t>(buf_.size(), size_t(length_));
      out->append(buf_, 0, take);
      buf_.erase(0, take);
      if (length_ > 0) length_ -= static_cast<long long>(take);
      return true;
    }
    if (done_) return false;
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (buf_.size() > 64) return fail("agent: bad chunk size line");
      auto r = fill();
      if (!r) return fail(r.error());
      if (!*r) return fail("agent: stream closed inside a chunk header");
    }
    char* endp = nullptr;
    unsigned long long size = std::strtoull(buf_.c_str(), &endp, 16);
    if (endp == buf_.c_str()) return fail("agent: bad chunk size");
    if (size > kMaxAgentEnvelopeBytes) return fail("agent: chunk too large");
    buf_.erase(0, eol + 2);
    while (buf_.size() < size + 2) {
      auto r = fill();
      if (!r) return fail(r.error());
      if (!*r) return fail("agent: stream closed inside a chunk");
    }
    out->append(buf_, 0, size);
    buf_.erase(0, size + 2);
    if (size == 0) {
      done_ = true;
      return false;
    }
    return true;
  }

  Result<std::string> read_all_body() {
    std::string body;
    while (true) {
      auto r = read_body(&body);
      if (!r) return fail(r.error());
      if (!*r) return body;
      if (body.size() > kMaxAgentEnvelopeBytes) return fail("agent: body too large");
    }
  }

 private:
  Status wait(short events) {
    while (true) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) return fail("agent: timed out");
      pollfd p{fd_, events, 0};
      int slice =
          alive_ ? static_cast<int>(std::min<long long>(left, 1000)) : static_cast<int>(left);
      int rc = poll(&p, 1, slice);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return fail(std::string("agent: poll: ") + strerror(errno));
      if (rc == 0) {
        if (alive_ && !alive_()) return fail("the sandbox stopped (out of memory or crashed)");
        continue;
      }
      return {};
    }
  }

  int fd_;
  Clock::time_point deadline_;
  std::function<bool()> alive_;
  std::string buf_;
  bool chunked_ = false;
  bool done_ = false;
  long long length_ = -1;
};

std::string request(const std::string& method, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& headers,
                    const std::string& body) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
  if (method != "GET" || !body.empty())
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "\r\n";
  return r + body;
}

}  // namespace

Status agent_health(int fd, int timeout_ms) {
  Conn c(fd, timeout_ms);
  if (auto st = c.send_all(request("GET", "/health", {}, "")); !st) return st;
  auto status = c.read_head();
  if (!status) return fail(status.error());
  if (*status != 204 && *status != 200)
    return fail("agent: /health answered " + std::to_string(*status));
  return {};
}

Status agent_init(int fd, const AgentInit& init, int timeout_ms) {
  json env = json::object();
  for (const auto& [k, v] : init.env_vars) env[k] = v;
  json body = {
      {"envVars", env}, {"accessToken", init.access_token}, {"defaultUser", init.default_user}};
  Conn c(fd, timeout_ms);
  if (auto st =
          c.send_all(request("POST", "/init", {{"Content-Type", "application/json"}}, body.dump()));
      !st)
    return st;
  auto status = c.read_head();
  if (!status) return fail(status.error());
  if (*status < 200 || *status >= 300) {
    auto b = c.read_all_body();
    return fail("agent: /init answered " + std::to_string(*status) +
                (b ? ": " + b->substr(0, 200) : ""));
  }
  return {};
}

Result<int> agent_run(int fd, const AgentCommand& cmd,
                      const std::function<void(std::string_view)>& on_stdout,
                      const std::function<void(std::string_view)>& on_stderr) {
  if (cmd.argv.empty()) return fail("agent run: empty command");
  json process = {{"cmd", cmd.argv[0]},
                  {"args", std::vector<std::string>(cmd.argv.begin() + 1, cmd.argv.end())}};
  if (!cmd.envs.empty()) {
    json e = json::object();
    for (const auto& [k, v] : cmd.envs) e[k] = v;
    process["envs"] = e;
  }
  if (!cmd.cwd.empty()) process["cwd"] = cmd.cwd;
  std::string msg = json{{"process", process}, {"stdin", false}}.dump();
  std::string envelope(5, '\0');
  uint32_t len = htonl(static_cast<uint32_t>(msg.size()));
  memcpy(envelope.data() + 1, &len, 4);
  envelope += msg;
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Type", "application/connect+json"},
      {"Connect-Protocol-Version", "1"},
      {"Connect-Timeout-Ms", std::to_string(cmd.timeout_ms)},
      {"Authorization", "Basic " + base64_encode(cmd.user + ":")}};
  if (!cmd.access_token.empty()) headers.push_back({"X-Access-Token", cmd.access_token});
  Conn c(fd, cmd.timeout_ms + 5000, cmd.alive);
  if (auto st = c.send_all(request("POST", "/process.Process/Start", headers, envelope)); !st)
    return fail(st.error());
  auto status = c.read_head();
  if (!status) return fail(status.error());
  if (*status != 200) {
    auto b = c.read_all_body();
    return fail("agent: Process/Start answered " + std::to_string(*status) +
                (b ? ": " + b->substr(0, 300) : ""));
  }
  std::string pending;
  std::optional<int> exit_code;
  while (true) {
    auto more = c.read_body(&pending);
    if (!more) return fail(more.error());
    while (pending.size() >= 5) {
      uint8_t flags = static_cast<uint8_t>(pending[0]);
      uint32_t n;
      memcpy(&n, pending.data() + 1, 4);
      n = ntohl(n);
      if (n > kMaxAgentEnvelopeBytes) return fail("agent: envelope too large");
      if (pending.size() < 5 + size_t(n)) break;
      json j = json::parse(pending.substr(5, n), nullptr, false);
      pending.erase(0, 5 + size_t(n));
      if (j.is_discarded()) return fail("agent: envelope is not JSON");
      if (flags & 0x02) {
        if (j.contains("error") && j["error"].is_object())
          return fail("agent: " + j["error"].value("code", std::string("unknown")) + ": " +
                      j["error"].value("message", std::string()));
        if (!exit_code) return fail("agent: process ended without a result");
        return *exit_code;
      }
      if (!j.contains("event") || !j["event"].is_object()) continue;
      const json& ev = j["event"];
      if (ev.contains("data") && ev["data"].is_object()) {
        for (const char* stream : {"stdout", "stderr"}) {
          if (!ev["data"].contains(stream) || !ev["data"][stream].is_string()) continue;
          auto bytes = base64_decode(ev["data"][stream].get<std::string>());
          if (!bytes) return fail("agent: bad base64 in output");
          const auto& cb = std::string_view(stream) == "stdout" ? on_stdout : on_stderr;
          if (cb) cb(*bytes);
        }
      } else if (ev.contains("end") && ev["end"].is_object()) {
        const json& end = ev["end"];
        bool exited = end.value("exited", true);
        exit_code = exited ? end.value("exitCode", 0) : -1;
      }
    }
    if (!*more) break;
  }
  return fail("agent: stream closed without end-of-stream");
}

Result<int> tcp_connect(const std::string& ip, uint16_t port, int timeout_ms) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) return fail("bad agent address " + ip);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return fail(std::string("socket: ") + strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    return fail("connect " + ip + ":" + std::to_string(port) + ": " + strerror(err));
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    int n;
    while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (n == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (n != 1 || err != 0) {
      close(fd);
      return fail("connect " + ip + ":" + std::to_string(port) + ": " +
                  (n == 0 ? std::string("timed out") : std::string(strerror(err ? err : errno))));
    }
  }
  return fd;
}

}  // namespace cordon::sandbox
