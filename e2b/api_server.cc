#include "e2b/api_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "e2b/detail/blocking_pool.h"
#include "e2b/wire.h"

namespace cordon::e2b {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using agent_socket = asio::generic::stream_protocol::socket;
using asio::awaitable;
using asio::redirect_error;
using asio::use_awaitable;

namespace {

constexpr size_t kRelayChunk = 64 * 1024;  // per direction per connection: the memory bound
constexpr std::chrono::seconds kWriteTimeout{30};

Result<tcp::endpoint> parse_listen(const std::string& text) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return fail("--api-listen '" + text + "': expected ADDR:PORT or [V6]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return fail("--api-listen '" + text + "': expected ADDR:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return fail("--api-listen '" + text + "': '" + host + "' is not an IP address");
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || p < 0 || p > 65535)
    return fail("--api-listen '" + text + "': bad port '" + port + "'");
  return tcp::endpoint(addr, static_cast<uint16_t>(p));
}

bool is_http_error(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::end_of_stream).category();
}

// A kept agent connection is reused only while it is quiet: readable now means the agent
// closed it (or sent bytes nobody asked for), and either way it is not fit for a new request.
bool quiet(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int n = ::poll(&p, 1, 0);
  return n == 0;
}

// Relays one message whose head `p` has already parsed: head and body from `in` to `out`,
// each piece written before the next is read (backpressure), chunked re-chunked as it comes.
template <bool isRequest, class In, class Out>
awaitable<beast::error_code> pump(In& in, beast::flat_buffer& inbuf,
                                  http::parser<isRequest, http::buffer_body>& p, Out& out,
                                  std::vector<char>& chunk) {
  http::serializer<isRequest, http::buffer_body> sr(p.get());
  beast::error_code ec;
  do {
    if (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      co_await http::async_read_some(in, inbuf, p, redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return ec;
      p.get().body().size = chunk.size() - p.get().body().size;
      // No bytes: a null buffer says "nothing yet". An empty non-null one would be serialized
      // as a zero-length chunk, which is the end of a chunked body.
      p.get().body().data = p.get().body().size ? chunk.data() : nullptr;
      p.get().body().more = !p.is_done();
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;
    }
    co_await http::async_write(out, sr, redirect_error(use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return ec;
  } while (!p.is_done() || !sr.is_done());
  co_return ec;
}

}  // namespace

struct ApiServer::Impl {
  ApiServerOptions options;
  std::shared_ptr<ControlPlane> control;
  std::shared_ptr<SandboxService> sandboxes;
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<std::thread> threads;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<ssl::context> tls;
  std::unique_ptr<detail::BlockingPool> pool;
  tcp::endpoint bound;
  std::atomic<size_t> clients{0}, agents{0};
  std::atomic<uint64_t> requests{0}, relayed{0}, busy{0};
  std::mutex stop_mu;
  bool stopped = false;

  struct Agent {
    Agent(Impl* i, std::string sid, agent_socket s)
        : impl(i), id(std::move(sid)), sock(std::move(s)) {
      impl->agents.fetch_add(1);
    }
    ~Agent() { impl->agents.fetch_sub(1); }
    Impl* impl;
    std::string id;
    agent_socket sock;
    beast::flat_buffer buf{64 << 10};
  };

  awaitable<void> accept_loop();
  awaitable<void> plain_session(tcp::socket s);
  awaitable<void> tls_session(tcp::socket s);
  template <class Stream>
  awaitable<void> serve(Stream& stream);
  template <class Stream>
  awaitable<bool> write_api(Stream& s, ApiResponse r, unsigned version, bool keep);
  template <class Stream>
  awaitable<bool> control_request(Stream& s, beast::flat_buffer& buf,
                                  http::request_parser<http::empty_body>& hp);
  template <class Stream>
  awaitable<bool> relay(Stream& s, beast::flat_buffer& buf,
                        http::request_parser<http::empty_body>& hp, std::unique_ptr<Agent>& agent,
                        std::vector<char>& chunk);
  Result<std::unique_ptr<Agent>> adopt_agent(asio::any_io_executor ex, const std::string& id,
                                             int fd);
};

template <class Stream>
awaitable<bool> ApiServer::Impl::write_api(Stream& s, ApiResponse r, unsigned version, bool keep) {
  http::response<http::string_body> res;
  res.version(version);
  res.result(static_cast<unsigned>(r.status));
  res.set(http::field::server, "cordon");
  if (!r.body.empty()) res.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.body() = r.body;
  res.keep_alive(keep);
  res.prepare_payload();
  beast::get_lowest_layer(s).expires_after(kWriteTimeout);
  beast::error_code ec;
  co_await http::async_write(s, res, redirect_error(use_awaitable, ec));
  co_return !ec && keep;
}

template <class Stream>
awaitable<bool> ApiServer::Impl::control_request(Stream& s, beast::flat_buffer& buf,
                                                 http::request_parser<http::empty_body>& hp) {
  unsigned version = hp.get().version();
  const size_t max = options.max_control_body;
  std::string too_big = "request body larger than " + std::to_string(max) + " bytes";
  if (auto cl = hp.content_length(); cl && *cl > max) {
    ApiResponse out_ = error_response(413, too_big);
    co_return co_await write_api(s, std::move(out_), version, false);
  }
  http::request_parser<http::string_body> bp(std::move(hp));
  bp.body_limit(max);
  beast::error_code ec;
  co_await http::async_read(s, buf, bp, redirect_error(use_awaitable, ec));
  if (ec == http::error::body_limit) {
    ApiResponse out_ = error_response(413, too_big);
    co_return co_await write_api(s, std::move(out_), version, false);
  }
  if (ec) {
    if (!is_http_error(ec) || ec == http::error::end_of_stream ||
        ec == http::error::partial_message)
      co_return false;
    {
      ApiResponse out_ = error_response(400, "malformed request body: " + ec.message());
      co_return co_await write_api(s, std::move(out_), version, false);
    }
  }
  auto& req = bp.get();
  ApiRequest ar;
  ar.method = std::string(req.method_string());
  ar.target = std::string(req.target());
  if (auto it = req.find("x-api-key"); it != req.end()) ar.api_key = std::string(it->value());
  ar.body = std::move(req.body());
  bool keep = req.keep_alive();
  beast::get_lowest_layer(s).expires_never();
  auto cp = control;
  auto job = [cp, ar = std::move(ar)] { return cp->handle(ar); };
  std::optional<ApiResponse> resp = co_await pool->run(std::move(job));
  if (!resp) {
    busy.fetch_add(1);
    {
      ApiResponse out_ =
          error_response(429, "the API is busy; retry shortly", options.busy_retry_after_s);
      co_return co_await write_api(s, std::move(out_), version, keep);
    }
  }
  {
    ApiResponse out_ = *resp;
    co_return co_await write_api(s, std::move(out_), version, keep);
  }
}

Result<std::unique_ptr<ApiServer::Impl::Agent>> ApiServer::Impl::adopt_agent(
    asio::any_io_executor ex, const std::string& id, int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    ::close(fd);
    return fail("the agent connection of sandbox " + id + " is not a socket");
  }
  agent_socket sock(ex);
  boost::system::error_code ec;
  sock.assign(asio::generic::stream_protocol(ss.ss_family, 0), fd, ec);
  if (ec) {
    ::close(fd);
    return fail("adopting the agent connection of sandbox " + id + ": " + ec.message());
  }
  return std::make_unique<Agent>(this, id, std::move(sock));
}

template <class Stream>
awaitable<bool> ApiServer::Impl::relay(Stream& s, beast::flat_buffer& buf,
                                       http::request_parser<http::empty_body>& hp,
                                       std::unique_ptr<Agent>& agent, std::vector<char>& chunk) {
  unsigned version = hp.get().version();
  std::string id(hp.get()["e2b-sandbox-id"]);
  relayed.fetch_add(1);
  auto gone = [&](const std::string& why) { return error_response(502, why); };
  if (!plausible_sandbox_id(id)) {
    ApiResponse out_ = gone("sandbox \"" + id.substr(0, 64) + "\" not found");
    co_return co_await write_api(s, std::move(out_), version, false);
  }
  if (agent && (agent->id != id || agent->buf.size() != 0 || !quiet(agent->sock.native_handle())))
    agent.reset();
  beast::get_lowest_layer(s).expires_never();
  if (!agent) {
    auto svc = sandboxes;
    auto job = [svc, id] { return svc->connect_agent(id); };
    std::optional<Result<int>> fd = co_await pool->run(std::move(job));
    if (!fd) {
      busy.fetch_add(1);
      {
        ApiResponse out_ =
            error_response(429, "the API is busy; retry shortly", options.busy_retry_after_s);
        co_return co_await write_api(s, std::move(out_), version, false);
      }
    }
    if (!*fd) {
      const Error& e = fd->error();
      std::string why = is(e, sandbox::ManagerError::kConflict) ? "sandbox \"" + id + "\" is paused"
                        : is(e, sandbox::ManagerError::kNotFound)
                            ? "sandbox \"" + id + "\" not found"
                            : "cannot reach the agent of sandbox \"" + id + "\": " + e.message;
      {
        ApiResponse out_ = gone(why);
        co_return co_await write_api(s, std::move(out_), version, false);
      }
    }
    auto a = adopt_agent(s.get_executor(), id, **fd);
    if (!a) {
      ApiResponse out_ = gone(a.error().message);
      co_return co_await write_api(s, std::move(out_), version, false);
    }
    agent = std::move(*a);
  }
  http::request_parser<http::buffer_body> rp(std::move(hp));
  rp.body_limit(std::numeric_limits<std::uint64_t>::max());
  bool head = rp.get().method() == http::verb::head;
  bool client_keep = rp.get().keep_alive();
  beast::error_code ec = co_await pump(s, buf, rp, agent->sock, chunk);
  if (ec) {
    agent.reset();
    co_return false;  // the client or the agent broke off mid-request
  }
  http::response_parser<http::buffer_body> pr;
  pr.body_limit(std::numeric_limits<std::uint64_t>::max());
  pr.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  if (head) pr.skip(true);
  co_await http::async_read_header(agent->sock, agent->buf, pr, redirect_error(use_awaitable, ec));
  if (ec) {
    agent.reset();
    {
      ApiResponse out_ = gone("the agent of sandbox \"" + id + "\" closed the connection");
      co_return co_await write_api(s, std::move(out_), version, false);
    }
  }
  bool agent_keep = pr.get().keep_alive();
  ec = co_await pump(agent->sock, agent->buf, pr, s, chunk);
  if (ec || !agent_keep) agent.reset();
  co_return !ec && client_keep && agent_keep;
}

template <class Stream>
awaitable<void> ApiServer::Impl::serve(Stream& stream) {
  beast::flat_buffer buf(options.max_header_bytes + kRelayChunk);
  std::unique_ptr<Agent> agent;
  std::vector<char> chunk(kRelayChunk);
  for (;;) {
    beast::get_lowest_layer(stream).expires_after(options.header_timeout);
    http::request_parser<http::empty_body> hp;
    hp.header_limit(static_cast<uint32_t>(options.max_header_bytes));
    hp.body_limit(std::numeric_limits<std::uint64_t>::max());  // each route sets its own
    beast::error_code ec;
    co_await http::async_read_header(stream, buf, hp, redirect_error(use_awaitable, ec));
    if (ec == http::error::header_limit) {
      {
        ApiResponse out_ = error_response(431, "request head too large");
        co_await write_api(stream, std::move(out_), 11, false);
      }
      break;
    }
    if (ec) {
      if (is_http_error(ec) && ec != http::error::end_of_stream &&
          ec != http::error::partial_message) {
        ApiResponse out_ = error_response(400, "malformed HTTP request: " + ec.message());
        co_await write_api(stream, std::move(out_), 11, false);
      }
      break;
    }
    requests.fetch_add(1);
    std::string_view target(hp.get().target().data(), hp.get().target().size());
    std::string_view path = target.substr(0, target.find('?'));
    bool keep = false;
    if (ControlPlane::is_control_path(path)) {
      keep = co_await control_request(stream, buf, hp);
    } else if (hp.get().find("e2b-sandbox-id") != hp.get().end()) {
      keep = co_await relay(stream, buf, hp, agent, chunk);
    } else {
      {
        ApiResponse out_ =
            error_response(404, "no such route: " + std::string(path.substr(0, 128)) +
                                    " (envd calls need an E2b-Sandbox-Id header)");
        co_await write_api(stream, std::move(out_), hp.get().version(), false);
      }
    }
    if (!keep) break;
  }
  beast::error_code ignored;
  beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);
}

awaitable<void> ApiServer::Impl::plain_session(tcp::socket sock) {
  beast::tcp_stream stream(std::move(sock));
  co_await serve(stream);
  clients.fetch_sub(1);
}

awaitable<void> ApiServer::Impl::tls_session(tcp::socket sock) {
  beast::ssl_stream<beast::tcp_stream> stream(std::move(sock), *tls);
  beast::get_lowest_layer(stream).expires_after(options.header_timeout);
  beast::error_code ec;
  co_await stream.async_handshake(ssl::stream_base::server, redirect_error(use_awaitable, ec));
  if (!ec) co_await serve(stream);
  clients.fetch_sub(1);
}

awaitable<void> ApiServer::Impl::accept_loop() {
  size_t next = 0;
  for (;;) {
    auto& io = *ios[next++ % ios.size()];
    beast::error_code ec;
    tcp::socket sock = co_await acceptor->async_accept(io, redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
      continue;  // EMFILE and the like: the next accept may succeed
    }
    if (clients.load() >= options.max_connections) {
      sock.close(ec);
      continue;
    }
    clients.fetch_add(1);
    sock.set_option(tcp::no_delay(true), ec);
    if (tls)
      asio::co_spawn(io, tls_session(std::move(sock)), asio::detached);
    else
      asio::co_spawn(io, plain_session(std::move(sock)), asio::detached);
  }
}

ApiServer::ApiServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServer::~ApiServer() {
  stop();
}

Result<std::unique_ptr<ApiServer>> ApiServer::start(ApiServerOptions options,
                                                    std::shared_ptr<ControlPlane> control,
                                                    std::shared_ptr<SandboxService> sandboxes) {
  auto ep = parse_listen(options.listen);
  if (!ep) return fail(ep.error());
  bool want_tls = !options.tls_cert.empty() || !options.tls_key.empty();
  if (want_tls && (options.tls_cert.empty() || options.tls_key.empty()))
    return fail("--api-tls-cert and --api-tls-key go together");
  if (!ep->address().is_loopback() && !want_tls)
    return fail("--api-listen " + options.listen +
                ": not a loopback address, and API keys travel on this port: give "
                "--api-tls-cert and --api-tls-key to serve it over TLS, or listen on 127.0.0.1");
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->control = std::move(control);
  impl->sandboxes = std::move(sandboxes);
  if (want_tls) {
    impl->tls = std::make_unique<ssl::context>(ssl::context::tls_server);
    boost::system::error_code ec;
    impl->tls->set_options(ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                           ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    impl->tls->use_certificate_chain_file(options.tls_cert, ec);
    if (ec) return fail("--api-tls-cert " + options.tls_cert + ": " + ec.message());
    impl->tls->use_private_key_file(options.tls_key, ssl::context::pem, ec);
    if (ec) return fail("--api-tls-key " + options.tls_key + ": " + ec.message());
  }
  unsigned n =
      options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) impl->ios.push_back(std::make_unique<asio::io_context>(1));
  impl->pool = std::make_unique<detail::BlockingPool>(std::max(1u, options.blocking_threads),
                                                      std::max<size_t>(1, options.blocking_queue));
  impl->acceptor = std::make_unique<tcp::acceptor>(*impl->ios[0]);
  boost::system::error_code ec;
  impl->acceptor->open(ep->protocol(), ec);
  if (!ec) impl->acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor->bind(*ep, ec);
  if (!ec) impl->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("--api-listen " + options.listen + ": " + ec.message());
  impl->bound = impl->acceptor->local_endpoint();
  asio::co_spawn(*impl->ios[0], impl->accept_loop(), asio::detached);
  for (auto& io : impl->ios) {
    impl->threads.emplace_back([ctx = io.get()] {
      auto guard = asio::make_work_guard(*ctx);
      ctx->run();
    });
  }
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

uint16_t ApiServer::port() const {
  return impl_->bound.port();
}

std::string ApiServer::address() const {
  const auto& a = impl_->bound.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" +
         std::to_string(impl_->bound.port());
}

ApiServerStats ApiServer::stats() const {
  ApiServerStats s;
  s.client_connections = impl_->clients.load();
  s.agent_connections = impl_->agents.load();
  s.blocking_in_flight = impl_->pool ? impl_->pool->in_flight() : 0;
  s.requests = impl_->requests.load();
  s.relayed = impl_->relayed.load();
  s.busy_refusals = impl_->busy.load();
  return s;
}

void ApiServer::stop() {
  if (!impl_) return;
  std::lock_guard lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (auto& io : impl_->ios) io->stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->pool->join();
  // Destroying the contexts destroys the suspended sessions: their sockets and agent
  // connections close here.
  impl_->acceptor.reset();
  impl_->ios.clear();
}

}  // namespace cordon::e2b
