#include "gateway/stages/credential_injector.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "common/http_grammar.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {
namespace {

constexpr std::string_view kTokenPrefix = "cdn_";
// After the prefix: an id of at least one character, '_', 43 base64url characters.
constexpr size_t kTokenMinTail = 1 + 1 + 43;
constexpr size_t kTokenSecretChars = 43;
// A base64 word shorter than this cannot hold a whole token (4 * ceil(49 / 3) = 68; a little
// slack for misaligned starts).
constexpr size_t kTokenMinBase64Word = 64;

bool is_b64url_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

// Either alphabet, no padding, leftover bits ignored: for finding things, not for validating.
std::string lenient_b64_decode(std::string_view word) {
  std::string out;
  out.reserve(word.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : word) {
    int v = b64_value(c);
    if (v < 0) break;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded (also '+' kept as is); malformed escapes are kept verbatim.
std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Calls `visit(layer, how, word_chars)` on each view of `text` in which something may hide:
// the raw text, its percent-decoding, and the base64 decoding of every long enough word of
// either (at each of the four alignments, since a word may start with a few non-base64
// characters). word_chars is the length of the base64 word a layer was decoded from (0 for
// the raw and percent-decoded layers).
template <class Visit>
void for_each_layer(std::string_view text, size_t min_word, Visit&& visit) {
  visit(text, "raw", size_t{0});
  std::string decoded;
  bool has_pct = text.find('%') != std::string_view::npos;
  if (has_pct) {
    decoded = percent_decode(text);
    visit(std::string_view(decoded), "percent-encoded", size_t{0});
  }
  auto words = [&](std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && b64_value(s[i]) < 0) ++i;
      size_t start = i;
      while (i < s.size() && b64_value(s[i]) >= 0) ++i;
      std::string_view word = s.substr(start, i - start);
      if (word.size() < min_word) continue;
      for (size_t shift = 0; shift < 4 && shift < word.size(); ++shift) {
        std::string bytes = lenient_b64_decode(word.substr(shift));
        visit(std::string_view(bytes), "base64", word.size());
      }
    }
  };
  words(text);
  if (has_pct) words(decoded);
}

void find_in_layer(std::string_view s, std::vector<FoundToken>& out) {
  size_t i = 0;
  while (i + kTokenPrefix.size() <= s.size()) {
    size_t at = std::string_view::npos;
    for (size_t k = i; k + kTokenPrefix.size() <= s.size(); ++k) {
      if ((s[k] | 0x20) != 'c') continue;  // cheap first-byte filter before the full compare
      if (ascii_iequals(s.substr(k, kTokenPrefix.size()), kTokenPrefix)) {
        at = k;
        break;
      }
    }
    if (at == std::string_view::npos) return;
    size_t j = at + kTokenPrefix.size();
    while (j < s.size() && is_b64url_char(s[j])) ++j;
    size_t tail = j - at - kTokenPrefix.size();
    if (tail >= kTokenMinTail) {
      FoundToken t;
      t.token = std::string(s.substr(at, j - at));
      // The id ends where the 43-character secret (preceded by '_') begins.
      size_t sep = j - kTokenSecretChars - 1;
      if (s[sep] == '_')
        t.id = std::string(s.substr(at + kTokenPrefix.size(), sep - at - kTokenPrefix.size()));
      bool dup = std::any_of(out.begin(), out.end(),
                             [&](const FoundToken& f) { return f.token == t.token; });
      if (!dup) out.push_back(std::move(t));
      // Past the cap the request is refused anyway; stop before the dedupe turns quadratic.
      if (out.size() > kMaxTokensPerRequest) return;
      i = j;
    } else {
      i = at + 1;
    }
  }
}

bool has_control(std::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
  }
  return false;
}

struct Scan {
  // Per header index: tokens found in its name or value.
  std::vector<std::vector<FoundToken>> in_header;
  std::vector<FoundToken> in_target;
  size_t total = 0;
};

Scan scan_request(const HeaderList& headers, std::string_view target) {
  Scan scan;
  scan.in_header.resize(headers.size());
  auto collect = [](std::string_view text, std::vector<FoundToken>& out) {
    for_each_layer(text, kTokenMinBase64Word,
                   [&](std::string_view layer, const char*, size_t) { find_in_layer(layer, out); });
  };
  for (size_t i = 0; i < headers.size(); ++i) {
    collect(headers[i].name, scan.in_header[i]);
    collect(headers[i].value, scan.in_header[i]);
    scan.total += scan.in_header[i].size();
  }
  collect(target, scan.in_target);
  scan.total += scan.in_target.size();
  return scan;
}

InjectionReport deny(InjectionReport r, std::string reason, std::string detail) {
  r.allowed = false;
  r.reason = std::move(reason);
  r.detail = std::move(detail);
  return r;
}

// The common first half of both paths: find tokens, strip the credential header(s) and every
// header carrying a token, and decide whether a token sat where it must not. Returns the
// tokens found in the credential header(s).
std::vector<FoundToken> strip_and_classify(HeaderList& headers, std::string_view target,
                                           const InjectionSpec* spec, bool spec_usable,
                                           const std::vector<std::string>& also_strip,
                                           InjectionReport& report) {
  Scan scan = scan_request(headers, target);
  std::vector<FoundToken> credential_tokens;
  std::string misuse_where;
  std::string misuse_id;
  HeaderList kept;
  kept.reserve(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    bool is_credential_header = spec_usable && ascii_iequals(headers[i].name, spec->header);
    bool is_other_credential_header =
        std::any_of(also_strip.begin(), also_strip.end(),
                    [&](const std::string& n) { return ascii_iequals(headers[i].name, n); });
    const auto& found = scan.in_header[i];
    bool strip = is_credential_header || is_other_credential_header || !found.empty();
    // A name that itself holds a token must not reach the audit line or an error body.
    std::string shown;
    if (strip) {
      shown = found.empty() || find_proxy_tokens(headers[i].name).empty()
                  ? headers[i].name
                  : std::string("(a header name holding a token)");
    }
    if (is_credential_header) {
      credential_tokens.insert(credential_tokens.end(), found.begin(), found.end());
    } else if (!found.empty() && misuse_where.empty()) {
      misuse_where = "header " + shown;
      misuse_id = found.front().id;
    }
    if (strip) {
      report.stripped_headers.push_back(std::move(shown));
    } else {
      kept.push_back(std::move(headers[i]));
    }
  }
  headers = std::move(kept);
  if (!scan.in_target.empty() && misuse_where.empty()) {
    misuse_where = "request target";
    misuse_id = scan.in_target.front().id;
  }
  if (scan.total > kMaxTokensPerRequest) {
    report = deny(std::move(report), "token_misuse",
                  std::to_string(scan.total) + " proxy tokens in one request");
  } else if (!misuse_where.empty()) {
    report.token_id = misuse_id;
    report = deny(std::move(report), "token_misuse",
                  "proxy token in the " + misuse_where +
                      (spec_usable ? " (only " + spec->header + " may carry one)"
                                   : " (destination has no credential)"));
  }
  return credential_tokens;
}

std::optional<std::string> spec_problem(const InjectionSpec& spec) {
  if (!is_injectable_header(spec.header)) return "forbidden_credential_header";
  if (spec.format.find("{secret}") == std::string::npos) return "credential_spec_invalid";
  return std::nullopt;
}

}  // namespace

std::string_view to_string(InjectionAction action) {
  switch (action) {
    case InjectionAction::kNone:
      return "none";
    case InjectionAction::kInjected:
      return "injected";
    case InjectionAction::kSwapped:
      return "swapped";
  }
  return "none";
}

bool is_injectable_header(std::string_view name) {
  if (!is_http_token(name)) return false;
  std::string n = ascii_lower(name);
  // Framing, routing and connection management; Expect is answered by the gateway itself.
  static constexpr std::array<std::string_view, 9> kNever = {
      "host", "content-length", "transfer-encoding", "connection", "upgrade",
      "te",   "trailer",        "keep-alive",        "expect"};
  if (std::find(kNever.begin(), kNever.end(), n) != kNever.end()) return false;
  if (n.rfind("proxy-", 0) == 0) return false;
  return true;
}

std::vector<FoundToken> find_proxy_tokens(std::string_view text) {
  std::vector<FoundToken> out;
  for_each_layer(text, kTokenMinBase64Word,
                 [&](std::string_view layer, const char*, size_t) { find_in_layer(layer, out); });
  return out;
}

InjectionReport strip_credentials(HeaderList& headers, std::string_view target,
                                  const InjectionSpec* spec,
                                  const std::vector<std::string>& also_strip) {
  InjectionReport report;
  bool usable = spec != nullptr && !spec_problem(*spec);
  if (spec) report.credential = spec->name;
  strip_and_classify(headers, target, spec, usable, also_strip, report);
  return report;
}

InjectionReport inject_credentials(HeaderList& headers, std::string_view target,
                                   const InjectionSpec* spec, bool tls, const SecretSource& secrets,
                                   const TokenVerifier& verify,
                                   const std::vector<std::string>& also_strip) {
  InjectionReport report;
  std::optional<std::string> problem;
  if (spec) {
    report.credential = spec->name;
    problem = spec_problem(*spec);
  }
  // Threat 17: strip first, whatever happens next.
  std::vector<FoundToken> tokens =
      strip_and_classify(headers, target, spec, spec != nullptr && !problem, also_strip, report);
  if (!report.allowed) return report;
  if (!spec) return report;  // no credential for this destination: nothing to inject
  if (problem) {
    // Threat 24: a rule that tries to inject Host, Content-Length, ... never takes effect.
    return deny(std::move(report), *problem,
                "credential " + spec->name + " cannot set header '" + spec->header + "'");
  }
  // Threat 22: a secret leaves only over TLS unless the rule opted in.
  if (!tls && !spec->allow_plaintext) {
    return deny(std::move(report), "credential_over_plaintext",
                "credential " + spec->name + " over plain HTTP (rule does not allow plaintext)");
  }
  if (tokens.size() > 1) {
    return deny(std::move(report), "token_misuse",
                std::to_string(tokens.size()) + " proxy tokens in " + spec->header);
  }
  if (tokens.size() == 1) {
    report.token_id = tokens[0].id;
    if (spec->token_mode == TokenRequirement::kOff) {
      return deny(std::move(report), "token_misuse",
                  "credential " + spec->name + " does not accept proxy tokens");
    }
    TokenVerdict verdict;
    if (verify) verdict = verify(tokens[0].token);
    if (verdict.kind == TokenVerdict::Kind::kInactive) {
      // Threat 20: revoked or expired, refused on this very request.
      if (!verdict.token_id.empty()) report.token_id = verdict.token_id;
      return deny(std::move(report), "token_inactive",
                  "proxy token " + (verdict.reason.empty() ? "inactive" : verdict.reason));
    }
    if (verdict.kind == TokenVerdict::Kind::kRefused) {
      if (!verdict.token_id.empty()) report.token_id = verdict.token_id;
      return deny(std::move(report), "token_refused",
                  "proxy token refused: " + (verdict.reason.empty() ? "unknown" : verdict.reason));
    }
    if (verdict.kind == TokenVerdict::Kind::kOtherCredential) {
      // Threat 19: a token for another credential never unlocks this one.
      if (!verdict.token_id.empty()) report.token_id = verdict.token_id;
      return deny(std::move(report), "token_misuse",
                  "proxy token is bound to another credential than " + spec->name);
    }
    if (!verdict.token_id.empty()) report.token_id = verdict.token_id;
    report.action = InjectionAction::kSwapped;
  } else {
    if (spec->token_mode == TokenRequirement::kRequired) {
      // Threat 18.
      return deny(std::move(report), "token_required",
                  "credential " + spec->name + " requires a proxy token in " + spec->header);
    }
    report.action = InjectionAction::kInjected;
  }

  Result<std::string> secret =
      secrets ? secrets(spec->name) : Result<std::string>(fail("no source"));
  if (!secret || secret->empty()) {
    // An empty secret would send a well-formed but meaningless credential: fail closed.
    report.action = InjectionAction::kNone;
    return deny(std::move(report), "secret_unavailable",
                "secret of credential " + spec->name + " unavailable: " +
                    (secret ? std::string("empty value") : secret.error().message));
  }
  std::string value;
  std::string_view format = spec->format;
  for (size_t pos = 0;;) {
    size_t at = format.find("{secret}", pos);
    value.append(format.substr(pos, at - pos));
    if (at == std::string_view::npos) break;
    value.append(*secret);
    pos = at + 8;
  }
  OPENSSL_cleanse(secret->data(), secret->size());
  if (has_control(value) || value.size() > kMaxRenderedCredentialBytes) {
    // Threat 24: CR/LF/NUL would split the header and smuggle another one.
    OPENSSL_cleanse(value.data(), value.size());
    report.action = InjectionAction::kNone;
    return deny(std::move(report), "bad_rendered_value",
                "rendered value of credential " + spec->name +
                    " has control bytes (CR, LF, NUL) or exceeds the size cap");
  }
  headers.push_back(Header{spec->header, std::move(value)});
  return report;
}

namespace {

// Base64 words at least as long as the encoding of a secret alone are worth decoding for it.
size_t min_word_for(const std::string& secret) {
  return std::max<size_t>(4, secret.size() * 4 / 3);
}

}  // namespace

ResponseScrubber::ResponseScrubber(const std::vector<std::string>& secrets) : secrets_(secrets) {
  // The layers of a header are decoded once, for the shortest such word over all secrets (not
  // once per secret: this runs on every response), and each secret then looks only at the
  // layers its own bound admits, so the result is as if decoded per secret.
  for (const auto& secret : secrets_)
    if (!secret.empty()) min_word_ = std::min(min_word_, min_word_for(secret));
}

const char* ResponseScrubber::leak_form(const Header& h) {
  if (!active()) return nullptr;
  const std::string_view texts[2] = {h.name, h.value};
  for (int t = 0; t < 2; ++t) {
    size_t n = 0;
    for_each_layer(texts[t], min_word_, [&](std::string_view layer, const char* how, size_t w) {
      if (n == layers_[t].size()) layers_[t].emplace_back();
      Layer& l = layers_[t][n++];
      l.how = how;
      l.word_chars = w;
      if (w == 0 && std::string_view(how) == "raw") {
        l.view = layer;  // the header's own text: no copy
      } else {
        l.bytes.assign(layer);  // reuses the capacity of an earlier header's layer
        l.view = {};
      }
    });
    used_[t] = n;
  }
  for (const auto& secret : secrets_) {
    if (secret.empty()) continue;
    size_t own_min = min_word_for(secret);
    for (int t = 0; t < 2; ++t) {
      for (size_t i = 0; i < used_[t]; ++i) {
        const Layer& l = layers_[t][i];
        if (l.word_chars != 0 && l.word_chars < own_min) continue;
        std::string_view view = l.view.data() != nullptr ? l.view : std::string_view(l.bytes);
        if (view.find(secret) != std::string_view::npos) return l.how;
      }
    }
  }
  return nullptr;
}

std::vector<ScrubbedHeader> scrub_response_headers(HeaderList& headers,
                                                   const std::vector<std::string>& secrets) {
  std::vector<ScrubbedHeader> removed;
  ResponseScrubber scrubber(secrets);
  if (!scrubber.active()) return removed;
  HeaderList kept;
  kept.reserve(headers.size());
  for (auto& h : headers) {
    if (const char* form = scrubber.leak_form(h)) {
      removed.push_back(ScrubbedHeader{h.name, form});
    } else {
      kept.push_back(std::move(h));
    }
  }
  headers = std::move(kept);
  return removed;
}

namespace {

// Replaces the raw token shapes of `text` (the scan of find_in_layer, without decoding).
bool redact_raw_tokens(std::string& text) {
  bool changed = false;
  size_t i = 0;
  while (i + kTokenPrefix.size() <= text.size()) {
    size_t at = std::string::npos;
    for (size_t k = i; k + kTokenPrefix.size() <= text.size(); ++k) {
      if ((text[k] | 0x20) == 'c' &&
          ascii_iequals(std::string_view(text).substr(k, kTokenPrefix.size()), kTokenPrefix)) {
        at = k;
        break;
      }
    }
    if (at == std::string::npos) break;
    size_t j = at + kTokenPrefix.size();
    while (j < text.size() && is_b64url_char(text[j])) ++j;
    if (j - at - kTokenPrefix.size() < kTokenMinTail) {
      i = at + 1;
      continue;
    }
    size_t sep = j - kTokenSecretChars - 1;
    std::string kept = text[sep] == '_' ? text.substr(at, sep + 1 - at) : std::string(kTokenPrefix);
    std::string replacement = kept + "[redacted]";
    text.replace(at, j - at, replacement);
    i = at + replacement.size();
    changed = true;
  }
  return changed;
}

}  // namespace

bool redact_for_audit(std::string& text, const std::vector<std::string>& secrets) {
  bool changed = false;
  // Decoding only shrinks a layer: a text shorter than the shortest token holds none.
  constexpr size_t kShortestToken = kTokenPrefix.size() + kTokenMinTail;
  if (text.size() >= kShortestToken) changed = redact_raw_tokens(text);
  size_t shortest_secret = static_cast<size_t>(-1);
  for (const auto& secret : secrets) {
    if (secret.empty()) continue;
    shortest_secret = std::min(shortest_secret, secret.size());
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
      text.replace(at, secret.size(), "[secret]");
      at += 8;
      changed = true;
    }
  }
  bool hidden = text.size() >= kShortestToken && !find_proxy_tokens(text).empty();
  if (!hidden && text.size() >= shortest_secret) {
    ResponseScrubber scrubber(secrets);
    hidden = scrubber.leak_form(Header{"", text}) != nullptr;
  }
  if (hidden) {
    text = "[redacted]";
    changed = true;
  }
  return changed;
}

}  // namespace cordon::gateway
