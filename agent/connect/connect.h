// The Connect protocol (JSON codec) as the E2B SDK speaks it (e2b-compat.md §4): unary calls
// (application/json both ways) and server-streaming calls (application/connect+json, a
// sequence of envelopes ending with an end-of-stream envelope). Socket-free stages
// (EnvelopeReader, encode_envelope, error mapping) plus thin helpers over http::Exchange.
//
// Messages are protobuf messages (agent/proto/*.proto, generated); the JSON mapping is
// protobuf's own (google::protobuf::util), with unknown fields ignored.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "agent/http/exchange.h"
#include "common/result.h"

namespace cordon::agent::connect {

enum class Code {
  kCanceled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

std::string_view code_name(Code c);  // "invalid_argument", ...
int http_status(Code c);             // 400, ...

// What a handler returns instead of a message when the call fails.
struct RpcError {
  Code code = Code::kUnknown;
  std::string message;
};

template <class T>
using RpcResult = std::variant<T, RpcError>;

// --- envelopes (socket-free) ---------------------------------------------------------------
inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
inline constexpr size_t kMaxEnvelopeBytes = 4 * 1024 * 1024;  // a request message's bound

std::string encode_envelope(uint8_t flags, std::string_view payload);

// Incremental decoder: feed bytes as they come; yields complete envelopes.
class EnvelopeReader {
 public:
  struct Envelope {
    uint8_t flags = 0;
    std::string payload;
  };
  // Appends bytes; fails on a compressed flag or a length over kMaxEnvelopeBytes.
  Status feed(std::string_view bytes);
  std::optional<Envelope> next();
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
};

// --- JSON mapping ---------------------------------------------------------------------------
// proto3 JSON → message; unknown fields ignored. Error text names the field and the problem.
Status parse_json(std::string_view json, google::protobuf::Message& out);
// message → proto3 JSON (lowerCamelCase names, defaults omitted, int64 as strings).
std::string to_json(const google::protobuf::Message& m);

// --- over an http::Exchange ------------------------------------------------------------------
// Reads a unary request body (bounded by kMaxEnvelopeBytes) into `out`. On failure the reply
// (invalid_argument, or unsupported media type) has been sent and false is returned.
bool read_unary_request(http::Exchange& ex, google::protobuf::Message& out);
// Sends a unary success (200 application/json) or error reply.
Status send_unary(http::Exchange& ex, const google::protobuf::Message& reply);
Status send_unary_error(http::Exchange& ex, const RpcError& err);

// Reads the one envelope of a server-streaming request into `out`. On failure an
// invalid_argument stream (200, end-of-stream with the error) has been sent and false is
// returned.
bool read_stream_request(http::Exchange& ex, google::protobuf::Message& out);

// The response side of a server-streaming call: 200 + application/connect+json, then one
// envelope per message, flushed as it is produced, then exactly one end-of-stream envelope
// (also on error, which after the 200 can only travel in that envelope). The destructor ends
// the stream with an `internal` error if finish() was not called.
class ServerStream {
 public:
  explicit ServerStream(http::Exchange& ex);
  ~ServerStream();
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  Status send(const google::protobuf::Message& m);
  Status finish();                       // end-of-stream "{}"
  Status finish(const RpcError& error);  // end-of-stream with "error"
  http::Exchange& exchange() { return ex_; }

 private:
  Status begin();
  http::Exchange& ex_;
  bool begun_ = false;
  bool finished_ = false;
};

// Connect-Timeout-Ms of the request, if present and valid.
std::optional<uint64_t> timeout_ms(const http::RequestHead& head);

}  // namespace cordon::agent::connect
