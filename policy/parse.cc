// Rules file → lint → compiled policy. The parser walks the YAML tree once, checking every
// key and type as it goes and collecting all errors (with yaml-cpp marks for positions);
// cross-checks (references, shadowed routes, ambiguous destinations) run afterwards on the
// parsed model. Nothing is compiled unless the whole file is clean.
//
// yaml-cpp throws on syntax errors and bad conversions; both are caught here and turned
// into diagnostics, so no exception leaves this file.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <unordered_map>

#include "common/file_io.h"
#include "common/http_grammar.h"
#include "policy/detail/gateway_section.h"
#include "policy/detail/model.h"
#include "policy/limits.h"
#include "policy/path.h"
#include "policy/policy.h"
#include "policy/policy_store.h"

namespace cordon::policy {
namespace {

using detail::StringIndex;

// The floors used when a rules file has no `floors` section (design.md §4, plus the
// "this host" and unspecified addresses).
constexpr const char* kDefaultFloors[] = {
    "0.0.0.0/8",     "127.0.0.0/8",    "169.254.0.0/16", "10.0.0.0/8",
    "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",  "::/128",
    "::1/128",       "fc00::/7",       "fe80::/10",
};

// Header names a credential may never set: they frame the message or steer a proxy, so a
// rule setting them could smuggle requests (specs/egress-threats.md item 24).
bool forbidden_header(std::string_view name) {
  static constexpr std::string_view kForbidden[] = {
      "host", "content-length", "transfer-encoding", "connection", "upgrade",
      "te",   "trailer",        "keep-alive",        "expect",
  };
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.starts_with("proxy-")) return true;
  return std::find(std::begin(kForbidden), std::end(kForbidden), lower) != std::end(kForbidden);
}

bool valid_id(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

constexpr std::string_view kIdRule = "letters, digits, '-', '_', '.', at most 64 bytes";

struct Field {
  YAML::Node key;
  YAML::Node value;
};
using Fields = std::map<std::string, Field, std::less<>>;

// Parsed-but-not-compiled pieces, with positions for the cross-checks.
struct RouteDraft {
  detail::Route route;
  YAML::Mark mark;
  std::string credential_name;
  YAML::Mark credential_mark;
};
struct DestDraft {
  detail::Destination dest;
  std::vector<detail::HostPattern> patterns;
  std::vector<RouteDraft> routes;
  YAML::Mark mark;
};
struct ProfileDraft {
  std::string name;
  YAML::Mark mark;
  std::vector<std::pair<std::string, YAML::Mark>> destinations;
};

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  std::vector<Diagnostic> errors;

  std::unique_ptr<detail::CompiledPolicy> run(std::string_view text);

 private:
  void error(const YAML::Mark& m, std::string message) {
    if (errors.size() >= kMaxLintErrors) return;
    Diagnostic d;
    d.file = file_;
    d.line = m.line >= 0 ? m.line + 1 : 0;
    d.column = m.column >= 0 ? m.column + 1 : 0;
    d.message = std::move(message);
    errors.push_back(std::move(d));
  }
  static YAML::Mark mark_of(const YAML::Node& n, const YAML::Mark& fallback) {
    YAML::Mark m = n.Mark();
    return m.line >= 0 ? m : fallback;
  }
  static std::string kind_name(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Null:
        return "nothing";
      case YAML::NodeType::Scalar:
        return "a scalar";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      default:
        return "an undefined value";
    }
  }

  // Checks that n is a mapping with only `allowed` keys, each once; returns its fields.
  std::optional<Fields> fields(const YAML::Node& n, const YAML::Mark& at, std::string_view what,
                               std::initializer_list<std::string_view> allowed) {
    if (!n.IsMap()) {
      error(mark_of(n, at), std::string(what) + ": expected a mapping, got " + kind_name(n));
      return std::nullopt;
    }
    Fields out;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: it->first lives only as long as the proxy
      if (!k.IsScalar()) {
        error(mark_of(k, n.Mark()), std::string(what) + ": keys must be plain strings");
        continue;
      }
      const std::string& name = k.Scalar();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        error(k.Mark(),
              std::string(what) + ": unknown key '" + name + "' (expected one of: " + list + ")");
        continue;
      }
      if (out.count(name)) {
        error(k.Mark(), std::string(what) + ": duplicate key '" + name + "'");
        continue;
      }
      out.emplace(name, Field{k, it->second});
    }
    return out;
  }

  const Field* need(const Fields& f, std::string_view key, const YAML::Node& parent,
                    std::string_view what) {
    auto it = f.find(key);
    if (it == f.end()) {
      error(parent.Mark(), std::string(what) + ": missing required key '" + std::string(key) + "'");
      return nullptr;
    }
    return &it->second;
  }
  static const Field* maybe(const Fields& f, std::string_view key) {
    auto it = f.find(key);
    return it == f.end() ? nullptr : &it->second;
  }

  std::optional<std::string> string(const Field& f, std::string_view what) {
    if (!f.value.IsScalar()) {
      error(mark_of(f.value, f.key.Mark()),
            std::string(what) + ": expected a string, got " + kind_name(f.value));
      return std::nullopt;
    }
    return f.value.Scalar();
  }
  std::optional<std::string> string_item(const YAML::Node& n, const YAML::Mark& at,
                                         std::string_view what) {
    if (!n.IsScalar()) {
      error(mark_of(n, at), std::string(what) + ": expected a string, got " + kind_name(n));
      return std::nullopt;
    }
    return n.Scalar();
  }
  std::optional<long> integer(const YAML::Node& n, const YAML::Mark& at, std::string_view what) {
    // Quoted scalars (tag "!") are strings even when they look like numbers.
    if (n.IsScalar() && n.Tag() != "!") {
      const std::string& s = n.Scalar();
      long v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (!s.empty() && ec == std::errc{} && p == s.data() + s.size()) return v;
    }
    error(mark_of(n, at), std::string(what) + ": expected an integer, got " +
                              (n.IsScalar() ? "'" + n.Scalar() + "'" : kind_name(n)));
    return std::nullopt;
  }
  bool is_list(const Field& f, std::string_view what) {
    if (f.value.IsSequence()) return true;
    error(mark_of(f.value, f.key.Mark()),
          std::string(what) + ": expected a list, got " + kind_name(f.value));
    return false;
  }
  template <class E>
  std::optional<E> one_of(const Field& f, std::string_view what,
                          std::initializer_list<std::pair<std::string_view, E>> options) {
    auto s = string(f, what);
    if (!s) return std::nullopt;
    std::string list;
    for (const auto& [name, value] : options) {
      if (*s == name) return value;
      list += (list.empty() ? "" : ", ") + std::string(name);
    }
    error(f.value.Mark(), std::string(what) + ": '" + *s + "' is not one of: " + list);
    return std::nullopt;
  }

  void parse_floors(const Field& f, detail::CompiledPolicy* out);
  void parse_dns(const Field& f, detail::CompiledPolicy* out);
  void parse_credentials(const Field& f, detail::CompiledPolicy* out,
                         std::map<std::string, std::uint32_t, std::less<>>* by_name);
  void parse_destinations(const Field& f, std::vector<DestDraft>* out);
  void parse_routes(const Field& f, const std::string& dest_id, std::vector<RouteDraft>* out);
  void parse_profiles(const Field& f, std::vector<ProfileDraft>* out);
  void check_shadowing(const DestDraft& d);

  std::string file_;
};

void Parser::parse_floors(const Field& f, detail::CompiledPolicy* out) {
  auto fl = fields(f.value, f.key.Mark(), "floors", {"deny_cidrs"});
  if (!fl) return;
  const Field* cidrs = need(*fl, "deny_cidrs", f.value, "floors");
  if (!cidrs || !is_list(*cidrs, "floors.deny_cidrs")) return;
  for (const auto& item : cidrs->value) {
    auto s = string_item(item, cidrs->key.Mark(), "floors.deny_cidrs");
    if (!s) continue;
    detail::Cidr c;
    std::string err;
    if (!detail::parse_cidr(*s, &c, &err)) {
      error(item.Mark(), "floors.deny_cidrs: " + err);
      continue;
    }
    out->floors.add(c);
  }
}

void Parser::parse_dns(const Field& f, detail::CompiledPolicy* out) {
  auto fl = fields(f.value, f.key.Mark(), "dns", {"unlisted"});
  if (!fl) return;
  if (const Field* u = maybe(*fl, "unlisted")) {
    auto v = one_of<DnsUnlisted>(
        *u, "dns.unlisted",
        {{"nxdomain", DnsUnlisted::kNxdomain}, {"refused", DnsUnlisted::kRefused}});
    if (v) out->dns_unlisted = *v;
  }
}

void Parser::parse_credentials(const Field& f, detail::CompiledPolicy* out,
                               std::map<std::string, std::uint32_t, std::less<>>* by_name) {
  if (!is_list(f, "credentials")) return;
  for (const auto& item : f.value) {
    auto fl = fields(item, f.key.Mark(), "credential", {"name", "secret", "inject", "token"});
    if (!fl) continue;
    Credential c;
    bool ok = true;
    const Field* name = need(*fl, "name", item, "credential");
    std::optional<std::string> n = name ? string(*name, "credential.name") : std::nullopt;
    if (!n) {
      ok = false;
    } else if (!valid_id(*n)) {
      error(name->value.Mark(), "credential name '" + *n + "': use " + std::string(kIdRule));
      ok = false;
    } else if (by_name->count(*n)) {
      error(name->value.Mark(), "duplicate credential name '" + *n + "'");
      ok = false;
    } else {
      c.name = *n;
    }
    const std::string what = "credential '" + (n ? *n : std::string("?")) + "'";
    if (const Field* s = need(*fl, "secret", item, what)) {
      auto v = string(*s, what + ".secret");
      bool good = v && !v->empty() && v->size() <= kMaxSecretNameBytes &&
                  std::all_of(v->begin(), v->end(), [](unsigned char ch) {
                    return std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '/';
                  });
      if (v && !good)
        error(s->value.Mark(), what +
                                   ".secret: a vault secret name (letters, digits, '-', '_', "
                                   "'.', '/', at most " +
                                   std::to_string(kMaxSecretNameBytes) +
                                   " bytes), never the value");
      if (good) c.secret = *v;
      ok = ok && good;
    } else {
      ok = false;
    }
    if (const Field* inj = need(*fl, "inject", item, what)) {
      auto il = fields(inj->value, inj->key.Mark(), what + ".inject", {"header", "format"});
      if (il) {
        if (const Field* h = need(*il, "header", inj->value, what + ".inject")) {
          auto v = string(*h, what + ".inject.header");
          if (v) {
            bool token = is_http_token(*v);
            if (!token) {
              error(h->value.Mark(),
                    what + ".inject.header: '" + *v + "' is not a valid header name");
              ok = false;
            } else if (forbidden_header(*v)) {
              error(h->value.Mark(),
                    what + ".inject.header: '" + *v +
                        "' may not be set by a credential (Host, Content-Length, "
                        "Transfer-Encoding, Connection, Upgrade, TE, Trailer, Keep-Alive, Expect "
                        "and Proxy-* frame or route the request)");
              ok = false;
            } else {
              c.header = *v;
            }
          } else {
            ok = false;
          }
        } else {
          ok = false;
        }
        c.format = "{secret}";
        if (const Field* fm = maybe(*il, "format")) {
          auto v = string(*fm, what + ".inject.format");
          if (v) {
            std::size_t first = v->find("{secret}");
            bool once =
                first != std::string::npos && v->find("{secret}", first + 1) == std::string::npos;
            bool clean = std::none_of(v->begin(), v->end(),
                                      [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; });
            if (!once) {
              error(fm->value.Mark(),
                    what + ".inject.format: must contain '{secret}' exactly once");
              ok = false;
            } else if (!clean) {
              error(fm->value.Mark(),
                    what + ".inject.format: control characters (CR, LF, ...) are not allowed");
              ok = false;
            } else if (v->size() > kMaxFormatBytes) {
              error(fm->value.Mark(), what + ".inject.format: longer than " +
                                          std::to_string(kMaxFormatBytes) + " bytes");
              ok = false;
            } else {
              c.format = *v;
            }
          } else {
            ok = false;
          }
        }
      } else {
        ok = false;
      }
    } else {
      ok = false;
    }
    if (const Field* t = maybe(*fl, "token")) {
      auto v = one_of<TokenMode>(*t, what + ".token",
                                 {{"off", TokenMode::kOff},
                                  {"optional", TokenMode::kOptional},
                                  {"required", TokenMode::kRequired}});
      if (v)
        c.token = *v;
      else
        ok = false;
    }
    // Register the name even when the rest is broken, so references to it do not pile up
    // "missing credential" errors on top of the real one.
    if (!c.name.empty()) {
      (*by_name)[c.name] = static_cast<std::uint32_t>(out->credentials.size());
      out->credentials.push_back(std::move(c));
    }
    (void)ok;
  }
}

void Parser::parse_routes(const Field& f, const std::string& dest_id,
                          std::vector<RouteDraft>* out) {
  const std::string where = "destination '" + dest_id + "'";
  if (!is_list(f, where + ".routes")) return;
  std::set<std::string, std::less<>> ids;
  for (const auto& item : f.value) {
    auto fl = fields(item, f.key.Mark(), where + ": route",
                     {"id", "action", "methods", "path", "credential"});
    if (!fl) continue;
    RouteDraft r;
    r.mark = item.Mark();
    r.route.line = item.Mark().line + 1;
    if (const Field* id = need(*fl, "id", item, where + ": route")) {
      auto v = string(*id, where + ": route id");
      if (v && !valid_id(*v)) {
        error(id->value.Mark(), where + ": route id '" + *v + "': use " + std::string(kIdRule));
      } else if (v && ids.count(*v)) {
        error(id->value.Mark(), where + ": duplicate route id '" + *v + "'");
      } else if (v) {
        ids.insert(*v);
        r.route.id = *v;
      }
    }
    const std::string what = where + ": route '" + r.route.id + "'";
    if (const Field* a = maybe(*fl, "action")) {
      auto v = one_of<bool>(*a, what + ".action", {{"allow", true}, {"deny", false}});
      if (v) r.route.allow = *v;
    }
    if (const Field* m = maybe(*fl, "methods")) {
      if (is_list(*m, what + ".methods")) {
        if (m->value.size() == 0)
          error(m->value.Mark(),
                what + ".methods: empty list (leave it out to match every method)");
        std::uint16_t bits = 0;
        for (const auto& mi : m->value) {
          auto s = string_item(mi, m->key.Mark(), what + ".methods");
          if (!s) continue;
          std::uint16_t b = detail::method_bit(*s);
          if (b == 0) {
            error(mi.Mark(), what + ".methods: unknown method '" + *s +
                                 "' (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT, "
                                 "TRACE; upper case)");
          } else if (bits & b) {
            error(mi.Mark(), what + ".methods: '" + *s + "' listed twice");
          }
          bits |= b;
        }
        if (bits != 0) r.route.methods = bits;
      }
    }
    if (const Field* p = maybe(*fl, "path")) {
      auto pl = fields(p->value, p->key.Mark(), what + ".path", {"exact", "prefix", "glob"});
      if (pl) {
        if (pl->size() != 1) {
          error(p->value.Mark(), what + ".path: give exactly one of exact, prefix, glob");
        } else {
          const auto& [kind, pf] = *pl->begin();
          auto v = string(pf, what + ".path." + kind);
          if (v) {
            r.route.path = *v;
            r.route.path_kind = kind == "exact"    ? detail::PathKind::kExact
                                : kind == "prefix" ? detail::PathKind::kPrefix
                                                   : detail::PathKind::kGlob;
            std::string err;
            if (r.route.path_kind == detail::PathKind::kGlob &&
                !detail::compile_glob(*v, &r.route.glob, &err)) {
              error(pf.value.Mark(), what + ".path.glob: " + err);
            } else {
              // A rule path must be canonical itself, or it could never match a request.
              std::string probe = *v;
              if (r.route.path_kind == detail::PathKind::kGlob)
                std::replace(probe.begin(), probe.end(), '*', 'x');
              auto c = canonicalize_target(probe);
              if (!c) {
                error(pf.value.Mark(), what + ".path." + kind + ": '" + *v +
                                           "' is not a valid request path (" + c.error().message +
                                           ")");
              } else if (c->has_query || c->path != probe) {
                error(pf.value.Mark(), what + ".path." + kind + ": '" + *v +
                                           "' is not in canonical form (requests are matched "
                                           "canonicalized, as '" +
                                           c->path + "')");
              }
            }
          }
        }
      }
    }
    if (const Field* c = maybe(*fl, "credential")) {
      auto v = string(*c, what + ".credential");
      if (v) {
        r.credential_name = *v;
        r.credential_mark = c->value.Mark();
        if (!r.route.allow)
          error(c->value.Mark(), what + ": a deny route cannot carry a credential");
      }
    }
    out->push_back(std::move(r));
  }
}

void Parser::parse_destinations(const Field& f, std::vector<DestDraft>* out) {
  if (!is_list(f, "destinations")) return;
  std::set<std::string, std::less<>> ids;
  for (const auto& item : f.value) {
    auto fl = fields(item, f.key.Mark(), "destination",
                     {"id", "hosts", "ports", "tls", "plaintext", "routes", "scrub_response_body"});
    if (!fl) continue;
    DestDraft d;
    d.mark = item.Mark();
    if (const Field* id = need(*fl, "id", item, "destination")) {
      auto v = string(*id, "destination id");
      if (v && !valid_id(*v)) {
        error(id->value.Mark(), "destination id '" + *v + "': use " + std::string(kIdRule));
      } else if (v && ids.count(*v)) {
        error(id->value.Mark(), "duplicate destination id '" + *v + "'");
      } else if (v) {
        ids.insert(*v);
        d.dest.id = *v;
      }
    }
    const std::string what = "destination '" + d.dest.id + "'";
    if (const Field* h = need(*fl, "hosts", item, what)) {
      if (is_list(*h, what + ".hosts")) {
        if (h->value.size() == 0) error(h->value.Mark(), what + ".hosts: empty list");
        std::set<std::string> seen;
        for (const auto& hi : h->value) {
          auto s = string_item(hi, h->key.Mark(), what + ".hosts");
          if (!s) continue;
          detail::HostPattern p;
          std::string err;
          if (!detail::parse_host_pattern(*s, &p, &err)) {
            error(hi.Mark(), what + ".hosts: '" + *s + "': " + err);
            continue;
          }
          std::string canon = (p.kind == detail::PatternKind::kOneLabel   ? "*."
                               : p.kind == detail::PatternKind::kAnyDepth ? "**."
                                                                          : "") +
                              p.suffix;
          if (!seen.insert(canon).second) {
            error(hi.Mark(), what + ".hosts: '" + *s + "' listed twice");
            continue;
          }
          d.dest.hosts.push_back(canon);
          d.patterns.push_back(std::move(p));
        }
      }
    }
    if (const Field* p = maybe(*fl, "ports")) {
      if (is_list(*p, what + ".ports")) {
        if (p->value.size() == 0) error(p->value.Mark(), what + ".ports: empty list");
        for (const auto& pi : p->value) {
          auto v = integer(pi, p->key.Mark(), what + ".ports");
          if (!v) continue;
          if (*v < 1 || *v > 65535) {
            error(pi.Mark(), what + ".ports: " + std::to_string(*v) + " is not a port (1-65535)");
          } else if (d.dest.has_port(static_cast<std::uint16_t>(*v))) {
            error(pi.Mark(), what + ".ports: " + std::to_string(*v) + " listed twice");
          } else {
            d.dest.add_port(static_cast<std::uint16_t>(*v));
          }
        }
      }
    } else {
      d.dest.add_port(443);
    }
    if (const Field* t = maybe(*fl, "tls")) {
      auto v = one_of<TlsMode>(
          *t, what + ".tls",
          {{"intercept", TlsMode::kIntercept}, {"passthrough", TlsMode::kPassthrough}});
      if (v) d.dest.tls = *v;
    }
    if (const Field* pt = maybe(*fl, "plaintext")) {
      auto v = one_of<Plaintext>(*pt, what + ".plaintext",
                                 {{"deny", Plaintext::kDeny},
                                  {"allow", Plaintext::kAllow},
                                  {"allow_with_credentials", Plaintext::kAllowWithCredentials}});
      if (v) d.dest.plaintext = *v;
    }
    if (const Field* sc = maybe(*fl, "scrub_response_body")) {
      auto v = one_of<bool>(*sc, what + ".scrub_response_body", {{"true", true}, {"false", false}});
      if (v) d.dest.scrub_response_body = *v;
    }
    if (const Field* r = maybe(*fl, "routes")) {
      parse_routes(*r, d.dest.id, &d.routes);
      if (d.dest.tls == TlsMode::kPassthrough && !d.routes.empty())
        error(r->key.Mark(), what +
                                 ": a passthrough destination is not decrypted, so it cannot "
                                 "have routes (use tls: intercept to filter requests)");
    }
    out->push_back(std::move(d));
  }
}

void Parser::parse_profiles(const Field& f, std::vector<ProfileDraft>* out) {
  if (!f.value.IsMap()) {
    error(mark_of(f.value, f.key.Mark()),
          "profiles: expected a mapping of profile names, got " + kind_name(f.value));
    return;
  }
  std::set<std::string, std::less<>> names;
  for (auto it = f.value.begin(); it != f.value.end(); ++it) {
    const YAML::Node k = it->first;  // a copy: it->first lives only as long as the proxy
    if (!k.IsScalar() || !valid_id(k.Scalar())) {
      error(mark_of(k, f.value.Mark()), "profile name: use " + std::string(kIdRule));
      continue;
    }
    if (!names.insert(k.Scalar()).second) {
      error(k.Mark(), "duplicate profile '" + k.Scalar() + "'");
      continue;
    }
    ProfileDraft p;
    p.name = k.Scalar();
    p.mark = k.Mark();
    const std::string what = "profile '" + p.name + "'";
    auto fl = fields(it->second, k.Mark(), what, {"destinations"});
    if (fl) {
      if (const Field* d = need(*fl, "destinations", it->second, what)) {
        if (is_list(*d, what + ".destinations")) {
          for (const auto& di : d->value) {
            auto s = string_item(di, d->key.Mark(), what + ".destinations");
            if (s) p.destinations.emplace_back(*s, di.Mark());
          }
        }
      }
    }
    out->push_back(std::move(p));
  }
}

// Literal text every path matched by the route starts with ("" when unknown).
std::string literal_prefix(const detail::Route& r) {
  switch (r.path_kind) {
    case detail::PathKind::kAny:
      return "/";
    case detail::PathKind::kExact:
    case detail::PathKind::kPrefix:
      return r.path;
    case detail::PathKind::kGlob: {
      std::size_t star = r.path.find('*');
      std::string p = r.path.substr(0, star);
      // "/a/**" also matches "/a": the '/' before a "**" segment is not guaranteed.
      if (star != std::string::npos && r.path.compare(star, 2, "**") == 0 && !p.empty() &&
          p.back() == '/' && p.size() > 1)
        p.pop_back();
      return p;
    }
  }
  return "";
}

// True when every request route b matches is also matched by route a.
bool covers(const detail::Route& a, const detail::Route& b) {
  if ((a.methods & b.methods) != b.methods) return false;
  using detail::PathKind;
  switch (a.path_kind) {
    case PathKind::kAny:
      return true;
    case PathKind::kExact:
      return b.path_kind == PathKind::kExact && b.path == a.path;
    case PathKind::kPrefix:
      return b.path_kind != PathKind::kAny && literal_prefix(b).starts_with(a.path);
    case PathKind::kGlob:
      if (b.path_kind == PathKind::kExact) return detail::glob_match(a.glob, b.path);
      return b.path_kind == PathKind::kGlob && b.path == a.path;
  }
  return false;
}

void Parser::check_shadowing(const DestDraft& d) {
  for (std::size_t j = 1; j < d.routes.size(); ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      if (covers(d.routes[i].route, d.routes[j].route)) {
        error(d.routes[j].mark, "destination '" + d.dest.id + "': route '" + d.routes[j].route.id +
                                    "' is unreachable: every request it matches is matched first "
                                    "by route '" +
                                    d.routes[i].route.id + "' (line " +
                                    std::to_string(d.routes[i].route.line) + ")");
        break;
      }
    }
  }
}

std::unique_ptr<detail::CompiledPolicy> Parser::run(std::string_view text) {
  YAML::Node root;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(std::string(text));
    if (docs.size() != 1) {
      error(YAML::Mark{}, docs.empty() ? "empty rules file" : "more than one YAML document");
      return nullptr;
    }
    root = docs[0];
  } catch (const YAML::Exception& e) {
    error(e.mark, "YAML syntax error: " + e.msg);
    return nullptr;
  }

  auto out = std::make_unique<detail::CompiledPolicy>();
  std::vector<DestDraft> dests;
  std::vector<ProfileDraft> profiles;
  std::map<std::string, std::uint32_t, std::less<>> credential_by_name;
  try {
    YAML::Mark top{};
    top.line = 0;
    top.column = 0;
    auto fl =
        fields(root, top, "rules file",
               {"version", "mode", "floors", "dns", "credentials", "destinations", "profiles",
                "gateway"});
    if (!fl) return nullptr;
    if (const Field* v = need(*fl, "version", root, "rules file")) {
      auto n = integer(v->value, v->key.Mark(), "version");
      if (n && *n != 1)
        error(v->value.Mark(), "version: " + std::to_string(*n) + " is not supported (expected 1)");
    }
    if (const Field* m = maybe(*fl, "mode")) {
      auto v = one_of<Mode>(*m, "mode", {{"enforce", Mode::kEnforce}, {"report", Mode::kReport}});
      if (v) out->mode = *v;
    }
    if (const Field* f = maybe(*fl, "floors")) {
      parse_floors(*f, out.get());
    } else {
      for (const char* c : kDefaultFloors) {
        detail::Cidr cidr;
        std::string err;
        if (detail::parse_cidr(c, &cidr, &err)) out->floors.add(cidr);
      }
    }
    if (const Field* f = maybe(*fl, "dns")) parse_dns(*f, out.get());
    if (const Field* f = maybe(*fl, "gateway"))
      detail::parse_gateway_section(
          f->key, f->value, &out->gateway,
          [this](const YAML::Mark& m, std::string message) { error(m, std::move(message)); });
    if (const Field* f = maybe(*fl, "credentials"))
      parse_credentials(*f, out.get(), &credential_by_name);
    if (const Field* f = need(*fl, "destinations", root, "rules file"))
      parse_destinations(*f, &dests);
    if (const Field* f = need(*fl, "profiles", root, "rules file")) parse_profiles(*f, &profiles);
  } catch (const YAML::Exception& e) {
    // Conversions are checked before they are made; this is a yaml-cpp surprise, reported
    // rather than crashing the caller.
    error(e.mark, std::string("unexpected YAML error: ") + e.msg);
    return nullptr;
  }

  // Cross-checks: credential references and shadowed routes.
  for (auto& d : dests) {
    for (auto& r : d.routes) {
      if (r.credential_name.empty()) continue;
      auto it = credential_by_name.find(r.credential_name);
      if (it == credential_by_name.end())
        error(r.credential_mark, "destination '" + d.dest.id + "': route '" + r.route.id +
                                     "' uses credential '" + r.credential_name +
                                     "', which is not defined under credentials");
      else
        r.route.credential = it->second;
    }
    check_shadowing(d);
  }

  // Profiles: references, duplicates, and ambiguous host patterns.
  std::unordered_map<std::string, std::uint32_t> dest_index;
  for (std::uint32_t i = 0; i < dests.size(); ++i)
    if (!dests[i].dest.id.empty()) dest_index.emplace(dests[i].dest.id, i);
  for (const auto& p : profiles) {
    detail::Profile prof;
    prof.name = p.name;
    prof.member.assign(dests.size(), 0);
    std::unordered_map<std::string, std::vector<std::uint32_t>> by_pattern;
    for (const auto& [id, mark] : p.destinations) {
      auto it = dest_index.find(id);
      if (it == dest_index.end()) {
        error(mark, "profile '" + p.name + "': destination '" + id + "' is not defined");
        continue;
      }
      if (prof.member[it->second]) {
        error(mark, "profile '" + p.name + "': destination '" + id + "' listed twice");
        continue;
      }
      prof.member[it->second] = 1;
      if (out->profiles.size() < detail::Profile::kBitProfiles)
        dests[it->second].dest.profile_bits |= std::uint64_t{1} << out->profiles.size();
      prof.destinations.push_back(it->second);
      const auto& dd = dests[it->second].dest;
      for (const auto& h : dd.hosts) {
        auto& others = by_pattern[h];
        for (std::uint32_t o : others) {
          const auto& od = dests[o].dest;
          for (std::uint16_t port : dd.ports) {
            if (od.has_port(port)) {
              error(mark, "profile '" + p.name + "': destinations '" + od.id + "' and '" + dd.id +
                              "' both list host '" + h + "' on port " + std::to_string(port) +
                              " (ambiguous: which routes apply?)");
              break;
            }
          }
        }
        others.push_back(it->second);
      }
    }
    out->profile_index.insert(prof.name, static_cast<std::uint32_t>(out->profiles.size()));
    out->profiles.push_back(std::move(prof));
  }

  if (!errors.empty()) return nullptr;

  for (std::uint32_t i = 0; i < dests.size(); ++i) {
    for (const auto& p : dests[i].patterns) out->hosts.add(p, i);
    for (auto& r : dests[i].routes) dests[i].dest.routes.push_back(std::move(r.route));
    out->destinations.push_back(std::move(dests[i].dest));
  }
  out->hosts.finish();
  out->floors.finish();
  return out;
}

}  // namespace

namespace detail {

// Shared by compile_policy and PolicyStore (which sets the generation before publishing).
std::pair<std::shared_ptr<Policy>, std::vector<Diagnostic>> compile(std::string_view text,
                                                                    std::string_view file_name) {
  Parser parser{std::string(file_name)};
  auto impl = parser.run(text);
  if (!impl) {
    if (parser.errors.empty()) parser.errors.push_back({std::string(file_name), 0, 0, "rejected"});
    return {nullptr, std::move(parser.errors)};
  }
  return {std::make_shared<Policy>(std::move(impl)), {}};
}

std::pair<std::shared_ptr<Policy>, std::vector<Diagnostic>> compile_file(const std::string& path) {
  auto text = read_file(path);
  if (!text) return {nullptr, {Diagnostic{path, 0, 0, text.error().message}}};
  if (text->size() > kMaxRulesFileBytes)
    return {
        nullptr,
        {Diagnostic{path, 0, 0,
                    "rules file larger than " + std::to_string(kMaxRulesFileBytes) + " bytes"}}};
  return compile(*text, path);
}

}  // namespace detail

CompileResult compile_policy(std::string_view yaml_text, std::string_view file_name) {
  auto [p, errors] = detail::compile(yaml_text, file_name);
  return CompileResult{std::move(p), std::move(errors)};
}

CompileResult load_policy_file(const std::string& path) {
  auto [p, errors] = detail::compile_file(path);
  return CompileResult{std::move(p), std::move(errors)};
}

}  // namespace cordon::policy
