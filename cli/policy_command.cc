// `cordon policy lint FILE` and `cordon policy explain FILE --profile P --method M --url URL`:
// the operator's view of the policy library. Parsing, lint and decisions live in policy/;
// this file only reads arguments and prints.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli.h"
#include "common/file_io.h"
#include "policy/path.h"
#include "policy/policy.h"

namespace cordon::cli {
namespace {

using policy::CompileResult;

struct ParsedUrl {
  bool tls = true;
  std::string host;
  std::uint16_t port = 443;
  std::string target = "/";
};

// Splits http(s)://host[:port][/path][?query]. Userinfo and fragments are refused as bad
// arguments; the host itself is judged by the policy (an IP literal is simply not listed).
Result<ParsedUrl> parse_url(const std::string& url) {
  ParsedUrl u;
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
    u.tls = false;
    u.port = 80;
  } else {
    return fail("--url must start with https:// or http://");
  }
  std::size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (end != std::string_view::npos) {
    std::string_view t = rest.substr(end);
    if (t.find('#') != std::string_view::npos) return fail("--url must not have a fragment");
    u.target = t[0] == '?' ? "/" + std::string(t) : std::string(t);
  }
  if (authority.find('@') != std::string_view::npos) return fail("--url must not have userinfo");
  if (authority.empty()) return fail("--url has no host");
  std::string_view host = authority;
  if (authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return fail("--url: unterminated IPv6 literal");
    host = authority.substr(0, close + 1);
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':') return fail("--url: bad authority");
    if (!authority.empty())
      authority.remove_prefix(1);
    else
      authority = {};
  } else if (std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    authority = authority.substr(colon + 1);
  } else {
    authority = {};
  }
  if (!authority.empty()) {
    unsigned long port = 0;
    for (char c : authority) {
      if (c < '0' || c > '9' || port > 65535) return fail("--url: bad port");
      port = port * 10 + static_cast<unsigned long>(c - '0');
    }
    if (port == 0 || port > 65535) return fail("--url: port out of range");
    u.port = static_cast<std::uint16_t>(port);
  }
  u.host = std::string(host);
  return u;
}

// Reads and compiles; prints lint errors to stderr. Returns nullptr when the file is
// unusable, with *code set.
std::shared_ptr<const policy::Policy> load(const std::string& file, int* code) {
  auto text = read_file(file);
  if (!text) {
    *code = report_error(text.error(), kExitFailure);
    return nullptr;
  }
  CompileResult r = policy::compile_policy(*text, file);
  if (!r.ok()) {
    std::fputs(r.errors_text().c_str(), stderr);
    *code = kExitCheckFailed;
    return nullptr;
  }
  return r.policy;
}

int run_lint(const std::string& file) {
  int code = kExitOk;
  auto p = load(file, &code);
  if (!p) return code;
  std::printf("%s: ok (%zu destinations, %zu profiles, mode %s)\n", file.c_str(),
              p->destination_count(), p->profile_names().size(),
              std::string(policy::to_string(p->mode())).c_str());
  return kExitOk;
}

struct ExplainArgs {
  std::string file, profile, method, url;
  bool json = false;
};

int run_explain(const ExplainArgs& a) {
  auto url = parse_url(a.url);
  if (!url) return report_error(url.error(), kExitUsage);
  if (a.method.empty()) return report_error("--method must not be empty", kExitUsage);
  int code = kExitOk;
  auto p = load(a.file, &code);
  if (!p) return code == kExitCheckFailed ? kExitFailure : code;
  if (!p->has_profile(a.profile)) {
    std::string names;
    for (const auto& n : p->profile_names()) names += (names.empty() ? "" : ", ") + n;
    return report_error(
        "no profile '" + a.profile + "' in " + a.file + " (profiles: " + names + ")", kExitUsage);
  }

  nlohmann::json out;
  std::string decision, reason, destination, route, detail;
  const policy::Credential* cred = nullptr;
  bool allowed = false;
  auto canon = policy::canonicalize_target(url->target);
  out["host"] = url->host;
  out["port"] = url->port;
  out["tls"] = url->tls;
  out["mode"] = std::string(policy::to_string(p->mode()));
  if (!canon) {
    // Ambiguous paths are refused before the policy is asked, in any mode.
    decision = "deny";
    reason = "path_ambiguous";
    detail = canon.error().message;
    out["verdict"] = false;
  } else {
    auto d = p->decide(
        policy::Request{a.profile, url->host, url->port, a.method, canon->path, url->tls});
    allowed = d.allowed;
    decision = d.allowed ? "allow" : "deny";
    if (d.allowed && !d.verdict) decision = "allow (report mode: the policy would deny)";
    reason = std::string(policy::reason_name(d.reason));
    destination = std::string(d.destination);
    route = std::string(d.route);
    cred = d.credential;
    out["verdict"] = d.verdict;
    out["path"] = canon->path;
    if (canon->has_query) out["query"] = canon->query;
  }
  out["allowed"] = allowed;
  out["decision"] = allowed ? "allow" : "deny";
  out["reason"] = reason;
  if (!detail.empty()) out["detail"] = detail;
  out["destination"] = destination.empty() ? nlohmann::json() : nlohmann::json(destination);
  out["route"] = route.empty() ? nlohmann::json() : nlohmann::json(route);
  if (cred) {
    out["credential"] = {{"name", cred->name},
                         {"secret", cred->secret},
                         {"header", cred->header},
                         {"format", cred->format},
                         {"token", std::string(policy::to_string(cred->token))}};
  } else {
    out["credential"] = nullptr;
  }

  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("decision:    %s\n", decision.c_str());
    std::printf("destination: %s\n", destination.empty() ? "-" : destination.c_str());
    std::printf("route:       %s\n", route.empty() ? "-" : route.c_str());
    if (cred) {
      std::printf("credential:  %s (vault secret '%s', header %s: \"%s\", token %s)\n",
                  cred->name.c_str(), cred->secret.c_str(), cred->header.c_str(),
                  cred->format.c_str(), std::string(policy::to_string(cred->token)).c_str());
    } else {
      std::printf("credential:  -\n");
    }
    std::printf("reason:      %s%s%s\n", reason.c_str(), detail.empty() ? "" : ": ",
                detail.c_str());
    if (canon) std::printf("path:        %s\n", canon->path.c_str());
  }
  return allowed ? kExitOk : kExitCheckFailed;
}

}  // namespace

void add_policy_commands(CLI::App& app, CliContext& ctx) {
  auto* policy = app.add_subcommand("policy", "check and explain a rules file");
  policy->require_subcommand(1);

  auto* lint = policy->add_subcommand(
      "lint",
      "check a rules file; errors as FILE:LINE:COLUMN: message on stderr (exit 0 clean, "
      "1 errors, 3 unreadable)");
  auto file = std::make_shared<std::string>();
  lint->add_option("FILE", *file, "rules file (YAML)")->required();
  on_run(lint, ctx, [file]() { return run_lint(*file); });

  auto* explain = policy->add_subcommand(
      "explain",
      "decide one request against a rules file and say why (exit 0 allowed, 1 denied, "
      "2 bad arguments, 3 unreadable or invalid rules file)");
  auto args = std::make_shared<ExplainArgs>();
  explain->add_option("FILE", args->file, "rules file (YAML)")->required();
  explain->add_option("--profile", args->profile, "profile name")->required();
  explain->add_option("--method", args->method, "HTTP method, e.g. GET")->required();
  explain->add_option("--url", args->url, "https://host[:port]/path?query")->required();
  explain->add_flag("--json", args->json, "print one JSON object");
  on_run(explain, ctx, [args]() { return run_explain(*args); });
}

}  // namespace cordon::cli
