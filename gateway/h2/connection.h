// The HTTP/2 client connection loop: one intercepted TLS connection whose client chose h2 by
// ALPN. Each stream goes through the same chain as an HTTP/1.1 request (request_pipeline.h:
// Host/:authority vs SNI, path, policy, credentials) after the h2 header stage, is forwarded
// to the upstream over h2 when the upstream offers it by ALPN (one multiplexed connection per
// client connection; the choice cached per upstream) or else over HTTP/1.1 (pooled), and gets
// one audit line.
//
// Trust: the client is an untrusted sandbox, the upstream an untrusted server. Memory per
// connection: the h2 windows (request bodies) and the response buffers of H2Limits.
#pragma once

#include <memory>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/impl.h"
#include "gateway/detail/upstream_connector.h"  // negotiated_h2

namespace cordon::gateway::detail {

// Serves the connection until it ends; closes nothing itself (the caller owns the stream).
// `deadline` is the connection's (its on_expire closes the client stream).
awaitable<void> serve_h2(Gateway::Impl& impl, Worker& worker, ByteStream& client,
                         std::shared_ptr<Deadline> deadline, const ConnectionFacts& facts,
                         const std::string& src, const std::string& dst, const std::string& sni);

}  // namespace cordon::gateway::detail
