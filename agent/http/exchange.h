// One HTTP/1.1 request on the agent's server and its answer, seen by a handler (process,
// filesystem, files, init). The server (agent/http/server.h) owns the socket and the parser;
// a handler only reads the request body and writes one response through this interface.
//
// Blocking by design: the agent serves one connection per thread (bounded count), so that a
// handler can stream a 1 GiB upload or a command's output with a fixed-size buffer and the
// kernel's socket buffers as the only backpressure.
//
// Trust: everything in the request is untrusted (the SDK's caller, or anything that can reach
// the agent's port); the server has already checked the head against its limits.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace cordon::agent::http {

struct RequestHead {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-decoded path of the target, without the query
  // Query parameters, percent-decoded ('+' is a space); a repeated key keeps its first value.
  std::map<std::string, std::string> query;
  // Header names lower-cased; a repeated header keeps its values joined with ", ".
  std::map<std::string, std::string> headers;

  const std::string* header(std::string_view lower_name) const;
  const std::string* query_param(std::string_view name) const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual const RequestHead& head() const = 0;

  // Reads up to `n` bytes of the request body (chunked encoding removed; Content-Encoding
  // untouched). Returns 0 at the end of the body. Fails when the client went away or sent a
  // malformed body; the server then closes the connection.
  virtual Result<size_t> read_body(char* buf, size_t n) = 0;

  // A whole response with a known body. Content-Length is set by the server.
  virtual Status respond(int status, const Headers& headers, std::string_view body) = 0;

  // A streamed response (chunked): begin once, then write any number of pieces, each sent to
  // the client before write() returns (no buffering of a long command's output), then end.
  virtual Status begin_stream(int status, const Headers& headers) = 0;
  virtual Status write(std::string_view piece) = 0;
  virtual Status end_stream() = 0;

  // Whether the client closed its side (checked without blocking). A streaming handler asks
  // this between pieces so that it stops promptly when nobody reads any more.
  virtual bool client_gone() = 0;
  // Waits up to `timeout` for the client to close; true if it did. Lets a stream that has
  // nothing to send (a quiet command, a watch) notice the client leaving.
  virtual bool wait_client_gone(std::chrono::milliseconds timeout) = 0;
};

// A JSON error body of the plain-HTTP endpoints: {"code": status, "message": message}
// (e2b-compat.md §7: the SDK reads `message`).
Status respond_json_error(Exchange& ex, int status, std::string_view message);

}  // namespace cordon::agent::http
