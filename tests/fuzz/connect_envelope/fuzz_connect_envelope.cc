// Input: [selector byte][feed-size byte][wire bytes]. The wire bytes go through an
// EnvelopeReader in pieces of the given size (so frames straddle feeds); every complete
// envelope's payload is parsed as the request the selector names. Properties: no crash, the
// reader's buffer never holds more than one envelope's bound plus one feed, and whatever
// parses prints to JSON that parses again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/connect/connect.h"
#include "agent/proto/process.pb.h"

namespace cn = cordon::agent::connect;

namespace {

void parse_as(uint8_t which, const std::string& payload) {
  ::process::StartRequest start;
  ::process::ConnectRequest conn;
  ::process::SendInputRequest input;
  google::protobuf::Message* m = which % 3 == 0   ? static_cast<google::protobuf::Message*>(&start)
                                 : which % 3 == 1 ? static_cast<google::protobuf::Message*>(&conn)
                                                  : static_cast<google::protobuf::Message*>(&input);
  if (!cn::parse_json(payload, *m)) return;
  std::string printed = cn::to_json(*m);
  std::unique_ptr<google::protobuf::Message> again(m->New());
  if (!cn::parse_json(printed, *again)) std::abort();  // our own output must parse
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t which = data[0];
  size_t step = size_t{data[1]} + 1;
  std::string wire(reinterpret_cast<const char*>(data + 2), size - 2);
  cn::EnvelopeReader reader;
  for (size_t i = 0; i < wire.size(); i += step) {
    if (!reader.feed(std::string_view(wire).substr(i, step))) return 0;
    while (auto env = reader.next()) {
      // Re-encoding gives the same frame.
      std::string frame = cn::encode_envelope(env->flags, env->payload);
      if (frame.size() != env->payload.size() + 5) std::abort();
      parse_as(which, env->payload);
    }
    if (reader.buffered() > cn::kMaxEnvelopeBytes + 5 + step) std::abort();
  }
  // The whole payload as plain JSON too (the unary path).
  parse_as(which, wire);
  return 0;
}
