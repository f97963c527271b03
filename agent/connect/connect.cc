#include "agent/connect/connect.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

namespace cordon::agent::connect {

namespace {

struct CodeInfo {
  std::string_view name;
  int status;
};

CodeInfo info(Code c) {
  switch (c) {
    case Code::kCanceled:
      return {"canceled", 499};
    case Code::kUnknown:
      return {"unknown", 500};
    case Code::kInvalidArgument:
      return {"invalid_argument", 400};
    case Code::kDeadlineExceeded:
      return {"deadline_exceeded", 504};
    case Code::kNotFound:
      return {"not_found", 404};
    case Code::kAlreadyExists:
      return {"already_exists", 409};
    case Code::kPermissionDenied:
      return {"permission_denied", 403};
    case Code::kResourceExhausted:
      return {"resource_exhausted", 429};
    case Code::kFailedPrecondition:
      return {"failed_precondition", 400};
    case Code::kAborted:
      return {"aborted", 409};
    case Code::kOutOfRange:
      return {"out_of_range", 400};
    case Code::kUnimplemented:
      return {"unimplemented", 501};
    case Code::kInternal:
      return {"internal", 500};
    case Code::kUnavailable:
      return {"unavailable", 503};
    case Code::kDataLoss:
      return {"data_loss", 500};
    case Code::kUnauthenticated:
      return {"unauthenticated", 401};
  }
  return {"unknown", 500};
}

std::string error_json(const RpcError& err) {
  nlohmann::json j = {{"code", std::string(code_name(err.code))}, {"message", err.message}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The media type without parameters, lower-cased.
std::string media_type(const http::RequestHead& head) {
  const std::string* ct = head.header("content-type");
  if (!ct) return {};
  std::string t = ct->substr(0, ct->find(';'));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

// Reads the whole body, at most kMaxEnvelopeBytes + 5 bytes.
Result<std::string> read_bounded_body(http::Exchange& ex) {
  std::string body;
  char buf[16 * 1024];
  while (true) {
    auto n = ex.read_body(buf, sizeof(buf));
    if (!n) return fail(n.error());
    if (*n == 0) return body;
    body.append(buf, *n);
    if (body.size() > kMaxEnvelopeBytes + 5) {
      return fail("request body larger than " + std::to_string(kMaxEnvelopeBytes) + " bytes");
    }
  }
}

}  // namespace

std::string_view code_name(Code c) {
  return info(c).name;
}
int http_status(Code c) {
  return info(c).status;
}

std::string encode_envelope(uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  out.push_back(static_cast<char>(flags));
  uint32_t n = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(payload);
  return out;
}

Status EnvelopeReader::feed(std::string_view bytes) {
  buf_.append(bytes);
  if (buf_.size() >= 5) {
    uint8_t flags = static_cast<uint8_t>(buf_[0]);
    if (flags & kFlagCompressed) return fail("envelope: compressed messages are not supported");
    if (flags & ~(kFlagCompressed | kFlagEndStream)) {
      return fail("envelope: unknown flags 0x" + std::to_string(flags));
    }
    uint32_t n = (uint32_t(uint8_t(buf_[1])) << 24) | (uint32_t(uint8_t(buf_[2])) << 16) |
                 (uint32_t(uint8_t(buf_[3])) << 8) | uint32_t(uint8_t(buf_[4]));
    if (n > kMaxEnvelopeBytes) {
      return fail("envelope: length " + std::to_string(n) + " over the limit of " +
                  std::to_string(kMaxEnvelopeBytes) + " bytes");
    }
  }
  return {};
}

std::optional<EnvelopeReader::Envelope> EnvelopeReader::next() {
  if (buf_.size() < 5) return std::nullopt;
  uint32_t n = (uint32_t(uint8_t(buf_[1])) << 24) | (uint32_t(uint8_t(buf_[2])) << 16) |
               (uint32_t(uint8_t(buf_[3])) << 8) | uint32_t(uint8_t(buf_[4]));
  if (n > kMaxEnvelopeBytes || buf_.size() - 5 < n) return std::nullopt;
  Envelope e;
  e.flags = static_cast<uint8_t>(buf_[0]);
  e.payload = buf_.substr(5, n);
  buf_.erase(0, 5 + size_t{n});
  return e;
}

Status parse_json(std::string_view json, google::protobuf::Message& out) {
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  out.Clear();
  std::string_view trimmed = json;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front()))) {
    trimmed.remove_prefix(1);
  }
  if (trimmed.empty()) return fail("empty message body (expected a JSON object)");
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &out, opts);
  if (!st.ok()) {
    return fail("bad " + out.GetDescriptor()->full_name() + " JSON: " + std::string(st.message()));
  }
  return {};
}

std::string to_json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = false;
  opts.always_print_primitive_fields = false;
  opts.preserve_proto_field_names = false;
  opts.always_print_enums_as_ints = false;
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(m, &out, opts);
  if (!st.ok()) return "{}";  // only on a message with invalid UTF-8 strings; never from us
  return out;
}

bool read_unary_request(http::Exchange& ex, google::protobuf::Message& out) {
  std::string mt = media_type(ex.head());
  if (mt != "application/json") {
    (void)send_unary_error(ex,
                           {Code::kInvalidArgument,
                            "content-type '" + mt + "' not supported, expected application/json"});
    return false;
  }
  auto body = read_bounded_body(ex);
  if (!body) {
    (void)send_unary_error(ex, {Code::kInvalidArgument, body.error().message});
    return false;
  }
  // An empty body is the empty message (Connect clients may omit "{}").
  if (body->empty()) {
    out.Clear();
    return true;
  }
  if (auto st = parse_json(*body, out); !st) {
    (void)send_unary_error(ex, {Code::kInvalidArgument, st.error().message});
    return false;
  }
  return true;
}

Status send_unary(http::Exchange& ex, const google::protobuf::Message& reply) {
  return ex.respond(200, {{"Content-Type", "application/json"}}, to_json(reply));
}

Status send_unary_error(http::Exchange& ex, const RpcError& err) {
  return ex.respond(http_status(err.code), {{"Content-Type", "application/json"}}, error_json(err));
}

bool read_stream_request(http::Exchange& ex, google::protobuf::Message& out) {
  // Errors of a streaming call travel in the end-of-stream envelope of a 200 response: the
  // client turns a non-200 status into a code from the status alone (404 -> unimplemented).
  auto reject = [&](std::string message) {
    ServerStream stream(ex);
    (void)stream.finish({Code::kInvalidArgument, std::move(message)});
    return false;
  };
  std::string mt = media_type(ex.head());
  if (mt != "application/connect+json") {
    return reject("content-type '" + mt + "' not supported, expected application/connect+json");
  }
  auto body = read_bounded_body(ex);
  if (!body) return reject(body.error().message);
  EnvelopeReader reader;
  if (auto st = reader.feed(*body); !st) return reject(st.error().message);
  auto env = reader.next();
  if (!env || env->flags != 0 || reader.buffered() != 0) {
    return reject("request body must be exactly one message envelope (" +
                  std::to_string(body->size()) + " bytes received)");
  }
  if (auto st = parse_json(env->payload, out); !st) return reject(st.error().message);
  return true;
}

ServerStream::ServerStream(http::Exchange& ex) : ex_(ex) {}

ServerStream::~ServerStream() {
  if (!finished_) (void)finish({Code::kInternal, "stream ended without a result"});
}

Status ServerStream::begin() {
  if (begun_) return {};
  begun_ = true;
  return ex_.begin_stream(200, {{"Content-Type", "application/connect+json"}});
}

Status ServerStream::send(const google::protobuf::Message& m) {
  if (finished_) return fail("stream already finished");
  if (auto st = begin(); !st) return st;
  return ex_.write(encode_envelope(0, to_json(m)));
}

Status ServerStream::finish() {
  if (finished_) return {};
  finished_ = true;
  if (auto st = begin(); !st) return st;
  if (auto st = ex_.write(encode_envelope(kFlagEndStream, "{}")); !st) return st;
  return ex_.end_stream();
}

Status ServerStream::finish(const RpcError& error) {
  if (finished_) return {};
  finished_ = true;
  if (auto st = begin(); !st) return st;
  nlohmann::json j = {
      {"error", {{"code", std::string(code_name(error.code))}, {"message", error.message}}}};
  if (auto st = ex_.write(encode_envelope(
          kFlagEndStream, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
      !st) {
    return st;
  }
  return ex_.end_stream();
}

std::optional<uint64_t> timeout_ms(const http::RequestHead& head) {
  const std::string* v = head.header("connect-timeout-ms");
  if (!v || v->empty() || v->size() > 10) return std::nullopt;
  uint64_t n = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

}  // namespace cordon::agent::connect
