#include "tests/e2e/gateway/h2_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/encoding.h"

namespace cordon::gateway::e2e {

namespace {

NgClient* self(void* ud) {
  return static_cast<NgClient*>(ud);
}

nghttp2_nv nv(const std::string& k, const std::string& v) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(k.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), k.size(), v.size(),
          NGHTTP2_NV_FLAG_NONE};
}

ssize_t read_cb(nghttp2_session* s, int32_t id, uint8_t* buf, size_t len, uint32_t* flags,
                nghttp2_data_source*, void* ud) {
  auto& o = self(ud)->out[id];
  size_t n = std::min(len, o.data.size());
  std::memcpy(buf, o.data.data(), n);
  o.data.erase(0, n);
  if (o.data.empty() && o.end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!o.trailers.empty()) {
      std::vector<nghttp2_nv> nva;
      for (auto& [k, v] : o.trailers) nva.push_back(nv(k, v));
      nghttp2_submit_trailer(s, id, nva.data(), nva.size());
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return static_cast<ssize_t>(n);
  }
  if (n == 0) {
    o.deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
              const uint8_t* value, size_t valuelen, uint8_t flags, void* ud) {
  auto& r = self(ud)->responses[f->hd.stream_id];
  std::string k(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (k == ":status") {
    r.status = std::stoi(v);
    return 0;
  }
  if (flags & NGHTTP2_NV_FLAG_NO_INDEX) r.never_indexed.push_back(k);
  (r.status != 0 && f->headers.cat == NGHTTP2_HCAT_HEADERS ? r.trailers : r.headers)
      .push_back({k, v});
  return 0;
}

int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* ud) {
  auto* c = self(ud);
  if (f->hd.type == NGHTTP2_GOAWAY) {
    c->goaway = true;
    c->goaway_code = f->goaway.error_code;
  }
  if (f->hd.type == NGHTTP2_RST_STREAM)
    c->responses[f->hd.stream_id].rst = f->rst_stream.error_code;
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    c->responses[f->hd.stream_id].ended = true;
  return 0;
}

int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* ud) {
  self(ud)->responses[id].body.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int on_close(nghttp2_session*, int32_t id, uint32_t, void* ud) {
  self(ud)->responses[id].closed = true;
  return 0;
}

std::string find(const H2Fields& f, const std::string& name) {
  for (auto& [k, v] : f) {
    if (k == name) return v;
  }
  return {};
}

}  // namespace

std::string NgClient::Response::header(const std::string& name) const {
  return find(headers, name);
}
std::string NgClient::Response::trailer(const std::string& name) const {
  return find(trailers, name);
}

NgClient::~NgClient() {
  if (session_) nghttp2_session_del(session_);
  if (ssl_) SSL_free(ssl_);
  if (ctx_) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

bool NgClient::connect(uint16_t proxy_port, const std::string& authority, const std::string& sni,
                       const std::string& ca_file, const std::string& user_pass) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(proxy_port);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
                    "\r\nProxy-Authorization: Basic " + base64_encode(user_pass) + "\r\n\r\n";
  if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return false;
  std::string head;
  char ch;
  while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd_, &ch, 1, 0) == 1) head += ch;
  if (head.find(" 200 ") == std::string::npos) return false;
  ctx_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof kAlpn);
  ssl_ = SSL_new(ctx_);
  SSL_set_fd(ssl_, fd_);
  SSL_set_tlsext_host_name(ssl_, sni.c_str());
  SSL_set1_host(ssl_, sni.c_str());
  if (SSL_connect(ssl_) != 1) return false;
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &on_close);
  nghttp2_session_client_new(&session_, cbs, this);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  return flush();
}

int32_t NgClient::start(const std::string& method, const std::string& authority,
                        const std::string& path, const H2Fields& headers, bool end_stream) {
  H2Fields all = {
      {":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}};
  all.insert(all.end(), headers.begin(), headers.end());
  std::vector<nghttp2_nv> nva;
  for (auto& [k, v] : all) nva.push_back(nv(k, v));
  nghttp2_data_provider p{};
  p.read_callback = &read_cb;
  int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                      end_stream ? nullptr : &p, nullptr);
  if (id > 0) {
    responses[id];
    out[id].end = end_stream;
  }
  flush();
  return id;
}

void NgClient::write(int32_t id, const std::string& bytes, bool end, const H2Fields& trailers) {
  Out& o = out[id];
  o.data += bytes;
  if (end) {
    o.end = true;
    o.trailers = trailers;
  }
  if (o.deferred) {
    o.deferred = false;
    nghttp2_session_resume_data(session_, id);
  }
  flush();
}

void NgClient::reset(int32_t id, uint32_t code) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, code);
  flush();
}

bool NgClient::flush() {
  const uint8_t* p = nullptr;
  ssize_t n;
  while ((n = nghttp2_session_mem_send(session_, &p)) > 0) {
    size_t off = 0;
    while (off < static_cast<size_t>(n)) {
      int w = SSL_write(ssl_, p + off, static_cast<int>(n - off));
      if (w <= 0) {
        dead = true;
        return false;
      }
      off += static_cast<size_t>(w);
    }
  }
  return n == 0;
}

bool NgClient::run_until(const std::function<bool()>& done, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (dead || std::chrono::steady_clock::now() >= until) return false;
    if (!flush()) return false;
    pollfd p{fd_, POLLIN, 0};
    if (SSL_pending(ssl_) == 0 && ::poll(&p, 1, 20) <= 0) continue;
    uint8_t buf[16384];
    int r = SSL_read(ssl_, buf, sizeof buf);
    if (r <= 0) {
      dead = true;
      return done();
    }
    if (nghttp2_session_mem_recv(session_, buf, static_cast<size_t>(r)) < 0) {
      dead = true;
      return done();
    }
  }
  flush();
  return true;
}

}  // namespace cordon::gateway::e2e
