// Which fields of the SDK's request bodies this cordon carries out. A security product never
// accepts a field it ignores (a sandbox asked to tunnel through a proxy that then goes straight
// out, a header rule that is never sent): every field of a body is either carried out, or
// refused with a 400 that names it, unless its value asks for what cordon does anyway (the
// schema's default: `autoPauseMemory: true`, `volumeMounts: []`, `rules: {}`). A field the
// schema does not have is refused as unknown, so that a typo is never read as "not set".
//
// When a feature lands, its field moves from the refused to the carried-out list here, and
// nowhere else: the parsers (e2b/wire.h) read only what this gate let through.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace cordon::e2b {

enum class RequestBody {
  kCreate,         // NewSandbox / NewSandboxV2 (POST /sandboxes, /v2/sandboxes)
  kNetwork,        // SandboxNetworkConfig: `network` of a create
  kNetworkUpdate,  // SandboxNetworkUpdateConfig: PUT /sandboxes/{id}/network
  kConnect,        // ConnectSandbox(V2): POST .../connect
  kResumeV1,       // ResumedSandbox: POST /sandboxes/{id}/resume
  kPause,          // SandboxPauseRequest: POST .../pause
  kTimeout,        // SandboxTimeoutRequest: POST .../timeout
};

// OK when every member of `body` (a JSON object) is one this cordon carries out, or a refused
// one with its inert value. Otherwise the error names the first offending field as
// `where.name` ("network.egressProxy: ...") and says why it is refused. `where` is the path of
// `body` in the request ("" for the body itself).
Status check_request_fields(const nlohmann::json& body, RequestBody kind,
                            std::string_view where = "");

}  // namespace cordon::e2b
