#include "agent/http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <cstring>
#include <limits>

namespace cordon::agent::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace asio = boost::asio;

namespace {

// Room kept in a connection's read buffer while a body streams in.
constexpr size_t kBodyReadBytes = 64 * 1024;

// A blocking socket as Beast's SyncReadStream, with an idle timeout per read. Writes do not
// go through Beast (the Exchange formats its own responses).
class FdStream {
 public:
  FdStream(int fd, std::chrono::milliseconds idle) : fd_(fd), idle_(idle) {}

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    ec = {};
    iovec iov[8];
    int count = 0;
    for (auto it = asio::buffer_sequence_begin(buffers);
         it != asio::buffer_sequence_end(buffers) && count < 8; ++it) {
      asio::mutable_buffer b(*it);
      if (b.size() == 0) continue;
      iov[count].iov_base = b.data();
      iov[count].iov_len = b.size();
      ++count;
    }
    if (count == 0) return 0;
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(idle_.count()));
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
      ec = asio::error::timed_out;
      return 0;
    }
    ssize_t n;
    do {
      n = ::readv(fd_, iov, count);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      ec = boost::system::error_code(errno, boost::system::system_category());
      return 0;
    }
    if (n == 0) {
      ec = asio::error::eof;
      return 0;
    }
    return static_cast<size_t>(n);
  }

 private:
  int fd_;
  std::chrono::milliseconds idle_;
};

Status write_all(int fd, iovec* iov, int count) {
  while (count > 0) {
    ssize_t n;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    do {
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      return fail(errno == EAGAIN ? std::string("client did not read for too long")
                                  : std::string("send: ") + std::strerror(errno));
    }
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return {};
}

Status write_all(int fd, std::string_view a, std::string_view b = {}) {
  iovec iov[2] = {{const_cast<char*>(a.data()), a.size()}, {const_cast<char*>(b.data()), b.size()}};
  return write_all(fd, iov, b.empty() ? 1 : 2);
}

std::string status_line(int status) {
  std::string reason(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
  if (reason.empty() || reason == "<unknown-status>") reason = "Status";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
}

bool status_has_no_body(int status) {
  return status == 204 || status == 304 || status < 200;
}

using Parser = bhttp::request_parser<bhttp::buffer_body>;

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(int fd, FdStream& stream, beast::flat_buffer& buf, Parser& parser, RequestHead head,
               bool keep_alive)
      : fd_(fd),
        stream_(stream),
        buf_(buf),
        parser_(parser),
        head_(std::move(head)),
        keep_alive_(keep_alive) {}

  const RequestHead& head() const override { return head_; }

  Result<size_t> read_body(char* out, size_t n) override {
    if (n == 0 || parser_.is_done()) return size_t{0};
    if (!sent_continue_) {
      sent_continue_ = true;
      const std::string* expect = head_.header("expect");
      if (expect && (*expect == "100-continue" || *expect == "100-Continue") && !responded_) {
        if (auto st = write_all(fd_, "HTTP/1.1 100 Continue\r\n\r\n"); !st) {
          body_broken_ = true;
          return fail(st.error());
        }
      }
    }
    // Beast reads max(512, free space) at a time: without room, a 1 GiB upload is two million
    // 512-byte reads. The connection's buffer keeps this capacity for its next requests.
    if (buf_.capacity() - buf_.size() < kBodyReadBytes) buf_.reserve(buf_.size() + kBodyReadBytes);
    auto& body = parser_.get().body();
    body.data = out;
    body.size = n;
    body.more = true;
    while (true) {
      boost::system::error_code ec;
      bhttp::read_some(stream_, buf_, parser_, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        body_broken_ = true;
        return fail("reading the request body: " + ec.message());
      }
      size_t got = n - body.size;
      if (got > 0 || parser_.is_done()) {
        body.data = nullptr;
        body.size = 0;
        return got;
      }
    }
  }

  Status respond(int status, const Headers& headers, std::string_view body) override {
    if (responded_) return fail("response already sent");
    responded_ = true;
    std::string head = status_line(status);
    append_headers(head, headers);
    if (!status_has_no_body(status))
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    head += "\r\n";
    if (status_has_no_body(status)) body = {};
    auto st = write_all(fd_, head, body);
    if (!st) write_broken_ = true;
    return st;
  }

  Status begin_stream(int status, const Headers& headers) override {
    if (responded_) return fail("response already sent");
    responded_ = true;
    streaming_ = true;
    std::string head = status_line(status);
    append_headers(head, headers);
    head += "Transfer-Encoding: chunked\r\n\r\n";
    auto st = write_all(fd_, head);
    if (!st) write_broken_ = true;
    return st;
  }

  Status write(std::string_view piece) override {
    if (!streaming_ || stream_ended_) return fail("write outside a streamed response");
    if (write_broken_) return fail("client connection broken");
    if (piece.empty()) return {};
    char size_line[32];
    int len = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
    iovec iov[3] = {{size_line, static_cast<size_t>(len)},
                    {const_cast<char*>(piece.data()), piece.size()},
                    {const_cast<char*>("\r\n"), 2}};
    auto st = write_all(fd_, iov, 3);
    if (!st) write_broken_ = true;
    return st;
  }

  Status end_stream() override {
    if (!streaming_ || stream_ended_) return fail("end_stream outside a streamed response");
    stream_ended_ = true;
    if (write_broken_) return fail("client connection broken");
    auto st = write_all(fd_, "0\r\n\r\n");
    if (!st) write_broken_ = true;
    return st;
  }

  bool client_gone() override { return wait_client_gone(std::chrono::milliseconds(0)); }

  bool wait_client_gone(std::chrono::milliseconds timeout) override {
    if (write_broken_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  // After the handler: whether the connection can carry another request.
  bool finish() {
    if (!responded_) {
      (void)respond_json_error(*this, 500, "handler sent no response");
    }
    if (streaming_ && !stream_ended_) return false;
    if (write_broken_ || body_broken_) return false;
    if (!keep_alive_) return false;
    // Drain an unread body (bounded) so that the next request starts at its head.
    char scratch[16 * 1024];
    size_t drained = 0;
    while (!parser_.is_done()) {
      auto n = read_body(scratch, sizeof(scratch));
      if (!n || drained > 1024 * 1024) return false;
      drained += *n;
    }
    return true;
  }

 private:
  void append_headers(std::string& out, const Headers& headers) const {
    for (const auto& [k, v] : headers) {
      out += k;
      out += ": ";
      out += v;
      out += "\r\n";
    }
    if (!keep_alive_) out += "Connection: close\r\n";
  }

  int fd_;
  FdStream& stream_;
  beast::flat_buffer& buf_;
  Parser& parser_;
  RequestHead head_;
  bool keep_alive_;
  bool responded_ = false;
  bool streaming_ = false;
  bool stream_ended_ = false;
  bool write_broken_ = false;
  bool body_broken_ = false;
  bool sent_continue_ = false;
};

void send_plain_error(int fd, int status, std::string_view message) {
  std::string body = std::string("{\"code\":") + std::to_string(status) + ",\"message\":\"" +
                     std::string(message) + "\"}";
  std::string head = status_line(status) +
                     "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n";
  (void)write_all(fd, head, body);
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::map<std::string, std::string> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto k = percent_decode(part.substr(0, eq), true);
    auto v = eq == std::string_view::npos ? std::optional<std::string>("")
                                          : percent_decode(part.substr(eq + 1), true);
    if (!k || !v) continue;  // a malformed pair is dropped, like Go's url.ParseQuery does
    out.emplace(std::move(*k), std::move(*v));
  }
  return out;
}

// --- Router ------------------------------------------------------------------------------------

void Router::add(std::string path, Handler h) {
  exact_[std::move(path)] = std::move(h);
}

void Router::add_prefix(std::function<bool(Exchange&)> h) {
  fallbacks_.push_back(std::move(h));
}

void Router::dispatch(Exchange& ex) const {
  for (const auto& f : fallbacks_) {
    if (f(ex)) return;
  }
  auto it = exact_.find(ex.head().path);
  if (it != exact_.end()) {
    it->second(ex);
    return;
  }
  (void)respond_json_error(ex, 404, "no handler for path " + ex.head().path);
}

// --- Server ------------------------------------------------------------------------------------

Server::Server(Handler handler, ServerLimits limits)
    : handler_(std::move(handler)), limits_(limits) {
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
}

Server::~Server() {
  stop();
  for (auto& t : accept_threads_) {
    if (t.joinable()) t.join();
  }
  {
    std::unique_lock lock(conns_mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    conns_cv_.wait(lock, [this] { return conns_.empty(); });
  }
  for (int fd : listen_fds_) ::close(fd);
  if (stop_pipe_[0] >= 0) ::close(stop_pipe_[0]);
  if (stop_pipe_[1] >= 0) ::close(stop_pipe_[1]);
}

Result<uint16_t> Server::listen_tcp(const std::string& addr_port) {
  std::string host;
  std::string port_text;
  if (!addr_port.empty() && addr_port[0] == '[') {
    size_t close = addr_port.find("]:");
    if (close == std::string::npos) return fail("--listen " + addr_port + ": expected [ADDR]:PORT");
    host = addr_port.substr(1, close - 1);
    port_text = addr_port.substr(close + 2);
  } else {
    size_t colon = addr_port.rfind(':');
    if (colon == std::string::npos) return fail("--listen " + addr_port + ": expected ADDR:PORT");
    host = addr_port.substr(0, colon);
    port_text = addr_port.substr(colon + 1);
  }
  char* end = nullptr;
  unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != 0 || port > 65535) {
    return fail("--listen " + addr_port + ": bad port '" + port_text + "'");
  }
  sockaddr_storage ss{};
  socklen_t len;
  int family;
  if (host.empty()) host = "0.0.0.0";
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    family = AF_INET;
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return fail("--listen " + addr_port + ": '" + host + "' is not an IP address");
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 512) != 0) {
    int e = errno;
    ::close(fd);
    return fail("listening on " + addr_port + ": " + std::strerror(e));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  uint16_t bound_port = family == AF_INET
                            ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                            : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  listen_fds_.push_back(fd);
  return bound_port;
}

Status Server::listen_vsock(uint32_t port) {
  int fd = ::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(std::string("vsock socket: ") + std::strerror(errno));
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 512) != 0) {
    int e = errno;
    ::close(fd);
    return fail("listening on vsock port " + std::to_string(port) + ": " + std::strerror(e));
  }
  listen_fds_.push_back(fd);
  return {};
}

void Server::start() {
  for (int fd : listen_fds_) accept_threads_.emplace_back([this, fd] { accept_loop(fd); });
}

void Server::wait() {
  for (auto& t : accept_threads_) {
    if (t.joinable()) t.join();
  }
}

void Server::stop() {
  if (stopping_.exchange(true)) return;
  if (stop_pipe_[1] >= 0) {
    char c = 1;
    (void)!::write(stop_pipe_[1], &c, 1);
  }
}

void Server::accept_loop(int listen_fd) {
  while (!stopping_.load()) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    int r = ::poll(p, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // EMFILE and friends: back off briefly instead of spinning.
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) ::poll(nullptr, 0, 50);
      continue;
    }
    timeval snd{};
    snd.tv_sec = static_cast<time_t>(limits_.send_timeout.count() / 1000);
    snd.tv_usec = static_cast<suseconds_t>((limits_.send_timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof(snd));
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on vsock
    if (active_.fetch_add(1) >= limits_.max_connections) {
      active_.fetch_sub(1);
      send_plain_error(fd, 503, "too many connections");
      ::close(fd);
      continue;
    }
    {
      std::lock_guard lock(conns_mu_);
      conns_.insert(fd);
    }
    if (!spawn_connection_thread(fd)) {
      {
        std::lock_guard lock(conns_mu_);
        conns_.erase(fd);
      }
      active_.fetch_sub(1);
      send_plain_error(fd, 503, "cannot start a connection thread");
      ::close(fd);
    }
  }
}

namespace {
struct ConnStart {
  Server* server;
  int fd;
};
}  // namespace

bool Server::spawn_connection_thread(int fd) {
  // A small fixed stack: a connection needs little (buffers are on the heap), and a thousand
  // background commands each keep one streaming connection open.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  auto* start = new ConnStart{this, fd};
  pthread_t tid;
  int rc = pthread_create(&tid, &attr, &Server::connection_main, start);
  pthread_attr_destroy(&attr);
  if (rc != 0) delete start;
  return rc == 0;
}

void* Server::connection_main(void* arg) {
  std::unique_ptr<ConnStart> st(static_cast<ConnStart*>(arg));
  Server* server = st->server;
  server->serve_connection(st->fd);
  {
    std::lock_guard lock(server->conns_mu_);
    ::close(st->fd);
    server->conns_.erase(st->fd);
    server->active_.fetch_sub(1);
    server->conns_cv_.notify_all();
  }
  return nullptr;
}

void Server::serve_connection(int fd) {
  FdStream stream(fd, limits_.idle_timeout);
  beast::flat_buffer buf;
  while (true) {
    Parser parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.max_head_bytes));
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // handlers bound their reads
    boost::system::error_code ec;
    bhttp::read_header(stream, buf, parser, ec);
    if (ec) {
      if (ec == bhttp::error::end_of_stream || ec == asio::error::timed_out ||
          ec == asio::error::eof || ec.category() == boost::system::system_category()) {
        return;
      }
      if (ec == bhttp::error::header_limit) {
        send_plain_error(
            fd, 431,
            "request head larger than " + std::to_string(limits_.max_head_bytes) + " bytes");
      } else {
        send_plain_error(fd, 400, "malformed request: " + ec.message());
      }
      return;
    }
    const auto& req = parser.get();
    RequestHead head;
    head.method = std::string(req.method_string());
    size_t count = 0;
    for (const auto& field : req) {
      if (++count > limits_.max_header_count) break;
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto [it, inserted] = head.headers.emplace(name, std::string(field.value()));
      if (!inserted) {
        it->second += ", ";
        it->second += std::string(field.value());
      }
    }
    if (count > limits_.max_header_count) {
      send_plain_error(fd, 431,
                       "more than " + std::to_string(limits_.max_header_count) + " headers");
      return;
    }
    std::string_view target(req.target().data(), req.target().size());
    size_t qpos = target.find('?');
    auto path = percent_decode(target.substr(0, qpos), false);
    if (!path || path->empty() || (*path)[0] != '/') {
      send_plain_error(fd, 400, "malformed request target");
      return;
    }
    head.path = std::move(*path);
    if (qpos != std::string_view::npos) head.query = parse_query(target.substr(qpos + 1));

    ExchangeImpl ex(fd, stream, buf, parser, std::move(head), req.keep_alive());
    handler_(ex);
    if (!ex.finish()) return;
  }
}

}  // namespace cordon::agent::http
