#include "gateway/h2/testing/fake_h2_upstream.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "gateway/h2/testing/compress.h"

namespace cordon::gateway::h2::testing {

std::string SeenStream::field(const std::string& name) const {
  for (const auto& f : fields) {
    if (f.name == name) return f.value;
  }
  return {};
}

std::string grpc_frame(std::string_view message, uint8_t flags) {
  std::string out;
  auto n = static_cast<uint32_t>(message.size());
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(n >> shift));
  out.append(message);
  return out;
}

std::vector<std::string> grpc_unframe(std::string& buf) {
  std::vector<std::string> out;
  while (buf.size() >= 5) {
    uint32_t n = 0;
    for (int i = 1; i <= 4; ++i) n = n << 8 | static_cast<unsigned char>(buf[i]);
    if (buf.size() < 5 + static_cast<size_t>(n)) break;
    out.push_back(buf.substr(5, n));
    buf.erase(0, 5 + n);
  }
  return out;
}

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The value of `key` in the query of `path` ("" when absent).
std::string query_param(const std::string& path, const std::string& key) {
  size_t q = path.find('?');
  while (q != std::string::npos) {
    size_t from = q + 1, to = path.find('&', from);
    std::string item = path.substr(from, to == std::string::npos ? std::string::npos : to - from);
    if (item.rfind(key + "=", 0) == 0) return item.substr(key.size() + 1);
    q = to;
  }
  return {};
}

nghttp2_nv nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

struct FakeH2Upstream::Session {
  enum class Kind {
    kPlain,
    kEcho,
    kServerStream,
    kFail,
    kConnectStream,
    kConnectUnary,
    kHang,
    kRst,
    kBig,
    kReflect
  };
  struct Stream {
    SeenStream seen;
    Kind kind = Kind::kPlain;
    std::string in;   // request body not yet framed
    std::string out;  // response body waiting to be sent
    bool out_end = false;
    uint64_t big_left = 0;  // /big: bytes still to generate (never held at once)
    bool deferred = false;
    bool responded = false;
    std::vector<std::pair<std::string, std::string>> trailers;
  };
  FakeH2Upstream* owner;
  nghttp2_session* session = nullptr;
  std::map<int32_t, std::unique_ptr<Stream>> streams;
  int conn_no = 0;

  Stream* get(int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second.get();
  }

  static ssize_t read_cb(nghttp2_session* s, int32_t id, uint8_t* buf, size_t len, uint32_t* flags,
                         nghttp2_data_source*, void* ud) {
    auto* self = static_cast<Session*>(ud);
    Stream* st = self->get(id);
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (st->out.empty() && st->big_left > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(st->big_left, 64 * 1024));
      st->out.assign(k, 'b');
      st->big_left -= k;
    }
    size_t n = std::min(len, st->out.size());
    std::memcpy(buf, st->out.data(), n);
    st->out.erase(0, n);
    if (st->out.empty() && st->big_left == 0 && st->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (!st->trailers.empty()) {
        std::vector<nghttp2_nv> nva;
        for (auto& [k, v] : st->trailers) nva.push_back(nv(k, v));
        nghttp2_submit_trailer(s, id, nva.data(), nva.size());
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
      return static_cast<ssize_t>(n);
    }
    if (n == 0) {
      st->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    return static_cast<ssize_t>(n);
  }

  void respond(int32_t id, Stream& st, const std::string& content_type, bool end = false,
               std::vector<std::pair<std::string, std::string>> extra = {}) {
    std::vector<std::pair<std::string, std::string>> h = {{":status", "200"},
                                                          {"content-type", content_type}};
    std::string auth = st.seen.field("authorization"), key = st.seen.field("x-api-key");
    if (!auth.empty()) h.push_back({"x-echo-authorization", auth});
    if (!key.empty()) h.push_back({"x-echo-api-key", key});
    for (auto& e : extra) h.push_back(e);
    std::vector<nghttp2_nv> nva;
    for (auto& [k, v] : h) nva.push_back(nv(k, v));
    nghttp2_data_provider p{};
    p.read_callback = &read_cb;
    nghttp2_submit_response(session, id, nva.data(), nva.size(), end ? nullptr : &p);
    st.responded = true;
  }

  void push_out(int32_t id, Stream& st, std::string_view bytes, bool end) {
    st.out.append(bytes);
    if (end) st.out_end = true;
    if (st.deferred) {
      st.deferred = false;
      nghttp2_session_resume_data(session, id);
    }
  }

  void grpc_trailers(Stream& st) {
    st.trailers = {{"grpc-status", "0"},
                   {"grpc-message", "OK"},
                   {"x-count", std::to_string(st.seen.messages)}};
    std::string auth = st.seen.field("authorization");
    if (!auth.empty()) st.trailers.push_back({"x-echo-trailer-authorization", auth});
  }

  void on_request(int32_t id, Stream& st) {
    const std::string& p = st.seen.path;
    std::string ct = st.seen.field("content-type");
    if (p.rfind("/hang", 0) == 0) {
      st.kind = Kind::kHang;
      respond(id, st, "text/plain");
    } else if (p.rfind("/rst", 0) == 0) {
      st.kind = Kind::kRst;
      uint32_t code = NGHTTP2_INTERNAL_ERROR;
      if (auto q = p.find("code="); q != std::string::npos) code = std::stoul(p.substr(q + 5));
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, code);
    } else if (p.rfind("/big", 0) == 0) {
      st.kind = Kind::kBig;
      size_t n = 0;
      if (auto q = p.find("n="); q != std::string::npos) n = std::stoull(p.substr(q + 2));
      st.big_left = n;
      respond(id, st, "application/octet-stream");
      push_out(id, st, "", true);
    } else if (p.find("/reflect") != std::string::npos) {
      st.kind = Kind::kReflect;
    } else if (p == "/connect-unary") {
      st.kind = Kind::kConnectUnary;
    } else if (ends_with(p, "/ConnectStream")) {
      st.kind = Kind::kConnectStream;
      respond(id, st, "application/connect+json");
    } else if (ends_with(p, "/Fail")) {
      st.kind = Kind::kFail;
      respond(id, st, "application/grpc", true, {{"grpc-status", "7"}, {"grpc-message", "denied"}});
    } else if (ends_with(p, "/ServerStream") && ct.rfind("application/grpc", 0) == 0) {
      st.kind = Kind::kServerStream;
      respond(id, st, "application/grpc");
    } else if (ends_with(p, "/Echo") && ct.rfind("application/grpc", 0) == 0) {
      st.kind = Kind::kEcho;
      respond(id, st, "application/grpc");
    } else {
      st.kind = Kind::kPlain;
    }
  }

  // /reflect: the request's fields as text in the body (an upstream debugging endpoint that
  // hands the injected credential back), `repeat` times; `enc` gzip/deflate compresses it
  // (any other value is sent as that coding, uncompressed bytes); `trailer=1` reflects the
  // authorization in a trailer too. Identity bodies carry a content-length.
  void reflect(int32_t id, Stream& st) {
    std::string once = st.seen.method + " " + st.seen.path + "\n";
    for (const auto& f : st.seen.fields) once += f.name + ": " + f.value + "\n";
    std::string body;
    int repeat = 1;
    if (auto r = query_param(st.seen.path, "repeat"); !r.empty()) repeat = std::stoi(r);
    for (int i = 0; i < repeat; ++i) body += once;
    std::string enc = query_param(st.seen.path, "enc");
    std::vector<std::pair<std::string, std::string>> extra;
    if (enc == "gzip" || enc == "deflate") {
      body = compress(body, enc == "gzip" ? 15 + 16 : 15, Z_BEST_SPEED);
    }
    if (!enc.empty()) {
      extra.push_back({"content-encoding", enc});
    } else {
      extra.push_back({"content-length", std::to_string(body.size())});
    }
    if (query_param(st.seen.path, "trailer") == "1") {
      st.trailers = {{"x-status", "done"},
                     {"x-echo-trailer-authorization", st.seen.field("authorization")},
                     {"x-echo-trailer-api-key", st.seen.field("x-api-key")}};
    }
    respond(id, st, "text/plain", false, extra);
    push_out(id, st, body, true);
  }

  void on_body(int32_t id, Stream& st) {
    if (st.kind != Kind::kEcho && st.kind != Kind::kServerStream && st.kind != Kind::kConnectStream)
      return;
    for (auto& m : grpc_unframe(st.in)) {
      st.seen.messages++;
      if (st.kind == Kind::kServerStream) {
        size_t colon = m.find(':');
        size_t n = std::stoul(m.substr(0, colon)), size = std::stoul(m.substr(colon + 1));
        for (size_t i = 0; i < n; ++i) push_out(id, st, grpc_frame(std::string(size, 's')), false);
      } else {
        push_out(id, st, grpc_frame(m), false);
      }
    }
  }

  void on_end(int32_t id, Stream& st) {
    switch (st.kind) {
      case Kind::kEcho:
      case Kind::kServerStream:
        grpc_trailers(st);
        push_out(id, st, "", true);
        break;
      case Kind::kConnectStream:
        push_out(id, st, grpc_frame("{\"metadata\":{}}", 0x02), true);
        break;
      case Kind::kConnectUnary: {
        std::string body = st.in;
        respond(id, st, "application/json");
        push_out(id, st, body, true);
        break;
      }
      case Kind::kReflect:
        reflect(id, st);
        break;
      case Kind::kPlain: {
        respond(id, st, "text/plain", false, {{"set-cookie", "sid=fake-session"}});
        push_out(id, st, "ok " + st.seen.method + " " + st.seen.path, true);
        break;
      }
      default:
        break;
    }
  }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* ud) {
    auto* self = static_cast<Session*>(ud);
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto st = std::make_unique<Stream>();
    st->seen.id = f->hd.stream_id;
    st->seen.connection = self->conn_no;
    self->streams[f->hd.stream_id] = std::move(st);
    return 0;
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                       void* ud) {
    auto* self = static_cast<Session*>(ud);
    Stream* st = self->get(f->hd.stream_id);
    if (!st) return 0;
    std::string n(reinterpret_cast<const char*>(name), namelen);
    std::string v(reinterpret_cast<const char*>(value), valuelen);
    bool ni = (flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0;
    if (n == ":method") {
      st->seen.method = v;
    } else if (n == ":path") {
      st->seen.path = v;
    } else if (n.front() != ':') {
      (f->headers.cat == NGHTTP2_HCAT_REQUEST ? st->seen.fields : st->seen.trailers)
          .push_back({n, v, ni});
    }
    return 0;
  }
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* ud) {
    auto* self = static_cast<Session*>(ud);
    Stream* st = self->get(f->hd.stream_id);
    if (!st) return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self->on_request(f->hd.stream_id, *st);
    }
    if (f->hd.type == NGHTTP2_RST_STREAM) st->seen.reset_by_client = true;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
      self->on_end(f->hd.stream_id, *st);
    }
    return 0;
  }
  static int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                     void* ud) {
    auto* self = static_cast<Session*>(ud);
    Stream* st = self->get(id);
    if (!st) return 0;
    st->seen.body_bytes += len;
    st->in.append(reinterpret_cast<const char*>(data), len);
    self->on_body(id, *st);
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t id, uint32_t code, void* ud) {
    auto* self = static_cast<Session*>(ud);
    Stream* st = self->get(id);
    if (!st) return 0;
    st->seen.closed = true;
    st->seen.close_error = code;
    self->owner->record(st->seen);
    self->streams.erase(id);
    return 0;
  }
};

FakeH2Upstream::FakeH2Upstream(const std::vector<std::string>& names)
    : ca_("fake h2 upstream test CA") {
  ctx_ = SSL_CTX_new(TLS_server_method());
  LeafCert leaf = ca_.issue(names);
  SSL_CTX_use_certificate(ctx_, leaf.cert.get());
  SSL_CTX_use_PrivateKey(ctx_, leaf.key.get());
  SSL_CTX_set_alpn_select_cb(
      ctx_,
      [](SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
         unsigned inlen, void*) {
        for (unsigned i = 0; i + 1 < inlen; i += 1 + in[i]) {
          if (in[i] == 2 && i + 3 <= inlen && std::memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
          }
        }
        return SSL_TLSEXT_ERR_ALERT_FATAL;  // h2 only: a fallback would hide a bug
      },
      nullptr);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    throw std::runtime_error("fake h2 upstream: bind/listen failed");
  }
  socklen_t len = sizeof a;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

FakeH2Upstream::~FakeH2Upstream() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  for (auto& t : workers_) t.join();
  SSL_CTX_free(ctx_);
}

void FakeH2Upstream::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    int no = ++connections_;
    std::lock_guard lk(mu_);
    workers_.emplace_back([this, fd, no] { serve(fd, no); });
  }
}

void FakeH2Upstream::record(const SeenStream& s) {
  std::lock_guard lk(seen_mu_);
  seen_.push_back(s);
}

std::vector<SeenStream> FakeH2Upstream::streams() const {
  std::lock_guard lk(seen_mu_);
  return seen_;
}

SeenStream FakeH2Upstream::wait_stream(const std::string& path, bool closed, int timeout_ms) const {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  do {
    {
      std::lock_guard lk(seen_mu_);
      for (const auto& s : seen_) {
        if (s.path == path && (!closed || s.closed)) return s;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until);
  return {};
}

void FakeH2Upstream::serve(int fd, int conn_no) {
  SSL* ssl = SSL_new(ctx_);
  SSL_set_fd(ssl, fd);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // no Nagle stall per window
  if (SSL_accept(ssl) != 1) {
    SSL_free(ssl);
    ::close(fd);
    return;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  Session s;
  s.owner = this;
  s.conn_no = conn_no;
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &Session::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Session::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Session::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Session::on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Session::on_close);
  nghttp2_session_server_new(&s.session, cbs, &s);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100}};
  nghttp2_submit_settings(s.session, NGHTTP2_FLAG_NONE, iv, 1);
  bool alive = true;
  while (alive && !stop_) {
    const uint8_t* p = nullptr;
    ssize_t n;
    while (alive && (n = nghttp2_session_mem_send(s.session, &p)) > 0) {
      size_t off = 0;
      while (off < static_cast<size_t>(n)) {
        int w = SSL_write(ssl, p + off, static_cast<int>(n - off));
        if (w > 0) {
          off += static_cast<size_t>(w);
          continue;
        }
        int err = SSL_get_error(ssl, w);
        if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) {
          alive = false;
          break;
        }
        pollfd pw{fd, static_cast<short>(err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
        if (::poll(&pw, 1, 100) < 0 || stop_) {
          alive = false;
          break;
        }
      }
    }
    if (!nghttp2_session_want_read(s.session) && !nghttp2_session_want_write(s.session)) break;
    if (SSL_pending(ssl) == 0) {
      pollfd pr{fd, POLLIN, 0};
      if (::poll(&pr, 1, 50) <= 0) continue;
    }
    uint8_t buf[16384];
    int r = SSL_read(ssl, buf, sizeof buf);
    if (r <= 0) {
      int err = SSL_get_error(ssl, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) continue;
      break;
    }
    if (nghttp2_session_mem_recv(s.session, buf, static_cast<size_t>(r)) < 0) break;
  }
  // Streams still open when the connection ends are recorded as they were.
  for (auto& [id, st] : s.streams) record(st->seen);
  nghttp2_session_del(s.session);
  SSL_free(ssl);
  ::close(fd);
}

}  // namespace cordon::gateway::h2::testing
