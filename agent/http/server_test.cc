#include "agent/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "agent/connect/connect.h"
#include "agent/proto/process.pb.h"

namespace cordon::agent::http {
namespace {

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads until `needle` appears (or 5 s pass / EOF).
std::string read_until(int fd, std::string_view needle, std::string* carry = nullptr) {
  std::string out = carry ? *carry : std::string();
  char buf[4096];
  while (out.find(needle) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string read_whole_body(Exchange& ex) {
  std::string body;
  char buf[7];  // small on purpose: many read_body calls per request
  while (true) {
    auto n = ex.read_body(buf, sizeof(buf));
    if (!n || *n == 0) break;
    body.append(buf, *n);
  }
  return body;
}

class ServerTest : public ::testing::Test {
 protected:
  void start(Handler h, ServerLimits limits = {}) {
    server_ = std::make_unique<Server>(std::move(h), limits);
    auto port = server_->listen_tcp("127.0.0.1:0");
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    server_->start();
  }
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
};

TEST_F(ServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  start([](Exchange& ex) {
    std::string q = ex.head().query_param("x") ? *ex.head().query_param("x") : "";
    (void)ex.respond(200, {{"Content-Type", "text/plain"}}, ex.head().path + "|" + q);
  });
  int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  send_all(fd, "GET /a%20b?x=1+2%26 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r1 = read_until(fd, "|1 2&");
  EXPECT_NE(r1.find("HTTP/1.1 200 OK"), std::string::npos);
  EXPECT_NE(r1.find("Content-Length: 9"), std::string::npos);
  EXPECT_NE(r1.find("/a b|1 2&"), std::string::npos);
  send_all(fd, "GET /second HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r2 = read_until(fd, "/second|");
  EXPECT_NE(r2.find("/second|"), std::string::npos);
  ::close(fd);
}

TEST_F(ServerTest, ChunkedRequestBodyIsDecoded) {
  start([](Exchange& ex) {
    std::string body = read_whole_body(ex);
    (void)ex.respond(200, {}, "got:" + body);
  });
  int fd = connect_to(port_);
  send_all(fd,
           "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n");
  std::string r = read_until(fd, "got:hello world!");
  EXPECT_NE(r.find("got:hello world!"), std::string::npos) << r;
  // The connection is reusable after a chunked body.
  send_all(fd, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  r = read_until(fd, "got:abc");
  EXPECT_NE(r.find("got:abc"), std::string::npos);
  ::close(fd);
}

TEST_F(ServerTest, UnreadBodyIsDrainedBeforeTheNextRequest) {
  start([](Exchange& ex) { (void)ex.respond(200, {}, "ok" + ex.head().path); });
  int fd = connect_to(port_);
  send_all(fd,
           "POST /one HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789GET /two HTTP/1.1\r\n\r\n");
  std::string r = read_until(fd, "ok/two");
  EXPECT_NE(r.find("ok/one"), std::string::npos);
  EXPECT_NE(r.find("ok/two"), std::string::npos);
  ::close(fd);
}

TEST_F(ServerTest, HeadTooLargeGets431) {
  ServerLimits l;
  l.max_head_bytes = 1024;
  start([](Exchange& ex) { (void)ex.respond(200, {}, "no"); }, l);
  int fd = connect_to(port_);
  send_all(fd, "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  std::string r = read_all(fd);
  EXPECT_NE(r.find("HTTP/1.1 431"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(ServerTest, TooManyHeadersGets431) {
  ServerLimits l;
  l.max_header_count = 10;
  start([](Exchange& ex) { (void)ex.respond(200, {}, "no"); }, l);
  int fd = connect_to(port_);
  std::string req = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 20; ++i) req += "X-H" + std::to_string(i) + ": v\r\n";
  send_all(fd, req + "\r\n");
  std::string r = read_all(fd);
  EXPECT_NE(r.find("HTTP/1.1 431"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(ServerTest, MalformedRequestGets400) {
  start([](Exchange& ex) { (void)ex.respond(200, {}, "no"); });
  int fd = connect_to(port_);
  send_all(fd, "GARBAGE\r\n\r\n");
  std::string r = read_all(fd);
  EXPECT_NE(r.find("HTTP/1.1 400"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(ServerTest, StreamedPiecesArriveBeforeTheEnd) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  start([&](Exchange& ex) {
    (void)ex.begin_stream(200, {{"Content-Type", "application/connect+json"}});
    (void)ex.write("first-piece");
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
    (void)ex.write("second");
    (void)ex.end_stream();
  });
  int fd = connect_to(port_);
  send_all(fd, "POST /s HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  std::string r = read_until(fd, "first-piece\r\n");
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(r.find("b\r\nfirst-piece\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("second"), std::string::npos);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  r = read_until(fd, "0\r\n\r\n", &r);
  EXPECT_NE(r.find("6\r\nsecond\r\n0\r\n\r\n"), std::string::npos) << r;
  ::close(fd);
  server_.reset();  // before the locals its handler uses go away
}

TEST_F(ServerTest, ClientGoneIsNoticed) {
  std::atomic<int> gone{-1};
  start([&](Exchange& ex) {
    (void)ex.begin_stream(200, {});
    gone = ex.wait_client_gone(std::chrono::seconds(5)) ? 1 : 0;
  });
  int fd = connect_to(port_);
  send_all(fd, "GET / HTTP/1.1\r\n\r\n");
  read_until(fd, "chunked\r\n\r\n");
  ::close(fd);
  for (int i = 0; i < 100 && gone == -1; ++i) ::usleep(20000);
  EXPECT_EQ(gone.load(), 1);
  server_.reset();  // before the locals its handler uses go away
}

TEST_F(ServerTest, ConnectionsBeyondTheBoundGet503) {
  ServerLimits l;
  l.max_connections = 2;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  start(
      [&](Exchange& ex) {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
        (void)ex.respond(200, {}, "ok");
      },
      l);
  int a = connect_to(port_), b = connect_to(port_);
  send_all(a, "GET / HTTP/1.1\r\n\r\n");
  send_all(b, "GET / HTTP/1.1\r\n\r\n");
  for (int i = 0; i < 100 && server_->active_connections() < 2; ++i) ::usleep(10000);
  int c = connect_to(port_);
  std::string r = read_all(c);
  EXPECT_NE(r.find("HTTP/1.1 503"), std::string::npos) << r;
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_NE(read_until(a, "ok").find("200 OK"), std::string::npos);
  ::close(a);
  ::close(b);
  ::close(c);
  server_.reset();  // before the locals its handler uses go away
}

TEST_F(ServerTest, RouterAnswers404Json) {
  Router router;
  router.add("/health", [](Exchange& ex) { (void)ex.respond(204, {}, {}); });
  start([&](Exchange& ex) { router.dispatch(ex); });
  int fd = connect_to(port_);
  send_all(fd, "GET /health HTTP/1.1\r\n\r\n");
  std::string r = read_until(fd, "\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 204"), std::string::npos);
  EXPECT_EQ(r.find("Content-Length"), std::string::npos);
  send_all(fd, "GET /nope HTTP/1.1\r\n\r\n");
  r = read_until(fd, "}");
  EXPECT_NE(r.find("HTTP/1.1 404"), std::string::npos);
  EXPECT_NE(r.find("application/json"), std::string::npos);
  EXPECT_NE(r.find("\"code\":404"), std::string::npos);
  ::close(fd);
  server_.reset();  // before the locals its handler uses go away
}

// Connect-protocol helpers over a real socket: unary errors are JSON-typed, and a bad
// streaming request still gets a 200 whose end-of-stream frame carries the error.
TEST_F(ServerTest, ConnectUnaryAndStreamErrors) {
  start([](Exchange& ex) {
    if (ex.head().path == "/unary") {
      ::process::ListRequest req;
      if (!connect::read_unary_request(ex, req)) return;
      ::process::ListResponse resp;
      (void)connect::send_unary(ex, resp);
    } else {
      ::process::ConnectRequest req;
      if (!connect::read_stream_request(ex, req)) return;
      connect::ServerStream s(ex);
      (void)s.send(req);
      (void)s.finish();
    }
  });
  int fd = connect_to(port_);
  send_all(fd,
           "POST /unary HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  std::string r = read_until(fd, "{}");
  EXPECT_NE(r.find("200 OK"), std::string::npos);
  EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos);
  send_all(
      fd, "POST /unary HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{x}");
  r = read_until(fd, "}\"}");
  r = read_until(fd, "\"}", &r);
  EXPECT_NE(r.find("400 Bad Request"), std::string::npos) << r;
  EXPECT_NE(r.find("\"code\":\"invalid_argument\""), std::string::npos) << r;

  std::string env = connect::encode_envelope(0, R"({"process":{"pid":5}})");
  send_all(fd,
           "POST /stream HTTP/1.1\r\nContent-Type: application/connect+json\r\nContent-Length: " +
               std::to_string(env.size()) + "\r\n\r\n" + env);
  r = read_until(fd, "0\r\n\r\n");
  EXPECT_NE(r.find(R"({"process":{"pid":5}})"), std::string::npos) << r;
  EXPECT_NE(r.find(std::string("\x02\0\0\0\x02{}", 7)), std::string::npos);

  std::string bad = std::string("\0\0\0\0\x09{\"process", 14);
  send_all(fd,
           "POST /stream HTTP/1.1\r\nContent-Type: application/connect+json\r\nContent-Length: " +
               std::to_string(bad.size()) + "\r\n\r\n" + bad);
  r = read_until(fd, "0\r\n\r\n");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("invalid_argument"), std::string::npos) << r;
  ::close(fd);
}

TEST(Query, ParsesAndDecodes) {
  auto q = parse_query("path=%2Ftmp%2Fa+b.txt&username=root&path=second&flag&bad=%zz");
  EXPECT_EQ(q["path"], "/tmp/a b.txt");
  EXPECT_EQ(q["username"], "root");
  EXPECT_EQ(q["flag"], "");
  EXPECT_EQ(q.count("bad"), 0u);
  EXPECT_FALSE(percent_decode("%4", false).has_value());
  EXPECT_EQ(percent_decode("a+b", false), "a+b");
}

}  // namespace
}  // namespace cordon::agent::http
