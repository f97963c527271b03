// Credential stage: pure header rewriting for one request (design.md §2 step 6, threats 17-24),
// and the response-side scrub of secret values (threat 23).
//
// Owns: stripping what the credential sets, finding proxy tokens wherever the sandbox hid them,
// swapping a valid token for the real secret, rendering and injecting the secret, and the
// refusals that go with those. Trusts: the InjectionSpec (from the compiled policy), the
// SecretSource and the TokenVerifier (vault lookups done by the caller); nothing in the request.
//
// Order in the gateway: check_request() -> strip the hop-by-hop list -> policy decision ->
//   allowed:  inject_credentials()      (strips, then injects or swaps, or denies)
//   denied:   strip_credentials()       (strips only; for report mode and the audit line)
// Proxy-Authorization must already be removed (it is in check_request's strip list): a token
// there would otherwise count as misuse.
//
// Token detection is best effort against naive exfiltration: "cdn_" (any case) followed by 45+
// base64url characters, looked for in header names and values and in the request target, raw,
// percent-decoded and inside base64 words (Basic auth, cookies, JWT-like blobs). Bodies are not
// scanned. A token deliberately re-encoded (reversed, hex, split) is not found; the token is
// worthless outside cordon, which is the real protection.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "gateway/stages/http_types.h"

namespace cordon::gateway {

enum class TokenRequirement { kOff, kOptional, kRequired };

// One destination's credential, as the policy compiled it (design.md §4 `credentials`).
struct InjectionSpec {
  std::string name;    // credential name (audit, secret lookup)
  std::string header;  // the header it sets, e.g. "Authorization"
  std::string format;  // e.g. "Bearer {secret}"; must contain "{secret}"
  TokenRequirement token_mode = TokenRequirement::kOff;
  bool allow_plaintext = false;  // the rule opted in to injection over plain HTTP (threat 22)
};

// What the vault says about a token for THIS request's credential and sandbox.
struct TokenVerdict {
  enum class Kind {
    kValid,            // unrevoked, unexpired, bound to this sandbox and this credential
    kRefused,          // unknown, or bound to another sandbox (reason says which)
    kInactive,         // a real token of this sandbox, but revoked or expired (threat 20)
    kOtherCredential,  // a real token, but for another credential (threat 19)
  };
  Kind kind = Kind::kRefused;
  std::string token_id;
  std::string reason;
};

using TokenVerifier = std::function<TokenVerdict(std::string_view token)>;
// Returns the current secret value of a credential (called only when injecting/swapping).
using SecretSource = std::function<Result<std::string>(std::string_view credential_name)>;

enum class InjectionAction { kNone, kInjected, kSwapped };
std::string_view to_string(InjectionAction action);

// The explanation for the audit line. Never holds a secret or a token, only names and ids.
struct InjectionReport {
  bool allowed = true;     // false: deny the request with 403 and `reason`
  std::string reason;      // token_misuse | token_required | token_refused | token_inactive |
                           // credential_over_plaintext | forbidden_credential_header |
                           // credential_spec_invalid | secret_unavailable | bad_rendered_value
  std::string detail;      // human readable: where, which header (never values)
  std::string credential;  // the credential's name, if the destination has one
  std::string token_id;    // the token involved, if any
  InjectionAction action = InjectionAction::kNone;
  std::vector<std::string> stripped_headers;  // names removed from the request
};

// Allowed request: strips, then injects or swaps (or refuses). `headers` is rewritten in place;
// on refusal it is still stripped (never forward it anyway). `spec` null = the matched route
// has no credential. `tls` = the request came over TLS that the gateway terminated.
// `also_strip`: header names that OTHER credentials of the same destination set (other
// routes); they are removed too, and a token in them counts as misuse (design.md §2 step 6:
// strip what the destination's credentials set, whichever route matched).
InjectionReport inject_credentials(HeaderList& headers, std::string_view target,
                                   const InjectionSpec* spec, bool tls, const SecretSource& secrets,
                                   const TokenVerifier& verify,
                                   const std::vector<std::string>& also_strip = {});

// Denied (or report-mode) request: removes the credential's header(s), the `also_strip`
// headers and every header that carries a proxy token; reports token_misuse when a token sat
// anywhere but in the credential header. Never injects, never calls the vault.
InjectionReport strip_credentials(HeaderList& headers, std::string_view target,
                                  const InjectionSpec* spec,
                                  const std::vector<std::string>& also_strip = {});

// A token-shaped string found in text: the candidate as it would be looked up, and its id.
struct FoundToken {
  std::string token;
  std::string id;
};
// All token-shaped strings in `text` (raw, percent-decoded, inside base64 words), deduplicated.
std::vector<FoundToken> find_proxy_tokens(std::string_view text);

// Whether a header name may carry an injected credential (not Host, Content-Length,
// Transfer-Encoding, Connection, Upgrade, TE, Trailer, Keep-Alive, Expect, Proxy-*; a valid
// token).
bool is_injectable_header(std::string_view name);

struct ScrubbedHeader {
  std::string name;
  std::string form;  // "raw" | "percent-encoded" | "base64" : how the secret appeared
};

// Response side (threat 23): removes every response header whose name or value contains one
// of `secrets` raw, percent-encoded or inside a base64/base64url word. Returns what was removed
// (names only) for the audit line. Empty secrets are ignored.
std::vector<ScrubbedHeader> scrub_response_headers(HeaderList& headers,
                                                   const std::vector<std::string>& secrets);

// The same test one header at a time, for a caller that renders headers as it goes (no copy of
// the list). Keeps a reference to `secrets`; reuses its decoding buffers across headers.
class ResponseScrubber {
 public:
  explicit ResponseScrubber(const std::vector<std::string>& secrets);
  // False when there is no non-empty secret: nothing can leak.
  bool active() const { return min_word_ != kNoSecret; }
  // How a secret appears in the header's name or value ("raw" | "percent-encoded" |
  // "base64"), or nullptr if none does.
  const char* leak_form(const Header& h);

 private:
  static constexpr size_t kNoSecret = static_cast<size_t>(-1);
  struct Layer {
    std::string_view view;  // into the header itself (raw), else empty and `bytes` holds it
    std::string bytes;
    const char* how = "";
    size_t word_chars = 0;
  };
  const std::vector<std::string>& secrets_;
  size_t min_word_ = kNoSecret;
  std::vector<Layer> layers_[2];  // of the name, of the value
  size_t used_[2] = {0, 0};
};

// Audit side (design.md §3: no secret in audit lines): rewrites `text`, an audited string that
// the sandbox may control, so that it holds no proxy token and none of `secrets`. A token's
// secret part is replaced ("cdn_<id>_[redacted]": the id stays, it names the row), a raw secret
// value by "[secret]"; if a token or a secret is still found in a decoded layer (percent-encoded,
// base64), the whole text becomes "[redacted]". Returns true if it changed anything.
bool redact_for_audit(std::string& text, const std::vector<std::string>& secrets);

}  // namespace cordon::gateway
