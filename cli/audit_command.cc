// `cordon audit verify|query|append`: the audit log (audit/writer.h, audit/reader.h).
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "audit/reader.h"
#include "audit/writer.h"
#include "cli/cli.h"
#include "common/time_format.h"

namespace cordon::cli {
namespace {

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Paths given, else the state directory's audit dir (which must exist).
bool resolve_paths(CliContext& ctx, std::vector<std::string>& paths, int& rc) {
  if (!paths.empty()) return true;
  StateDir state = ctx.state();
  if (!is_dir(state.audit_dir())) {
    rc = report_error("no audit log at " + state.audit_dir() +
                      " (is the state directory right? pass --state DIR or FILE|DIR arguments)");
    return false;
  }
  paths.push_back(state.audit_dir());
  return true;
}

// "2026-11-30T03:00:00Z" or a duration back from now ("15m", "2h", "7d").
std::optional<SystemTime> parse_time_arg(const std::string& text) {
  if (auto t = parse_rfc3339(text)) return t;
  if (auto d = parse_duration(text)) return std::chrono::system_clock::now() - *d;
  return std::nullopt;
}

// Values come from sandboxes: keep control characters (C0, DEL, C1) away from the terminal.
std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += '?';
      ++i;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string or_dash(const std::optional<std::string>& v) {
  return v && !v->empty() ? printable(*v) : "-";
}

}  // namespace

void add_audit_commands(CLI::App& app, CliContext& ctx) {
  auto* audit = app.add_subcommand("audit", "audit log: verify the chain, query, append notes");
  audit->require_subcommand(1);

  // verify
  {
    auto* cmd = audit->add_subcommand(
        "verify", "check the hash chain; exit 0 when intact, 1 with the first broken line");
    auto paths = std::make_shared<std::vector<std::string>>();
    auto partial = std::make_shared<bool>(false);
    cmd->add_option("FILE|DIR", *paths,
                    "log files or directories (default: the state's audit dir)");
    cmd->add_flag("--partial", *partial,
                  "accept a log whose first line is not seq 1 (older files removed on purpose)");
    on_run(cmd, ctx, [&ctx, paths, partial]() {
      int rc = kExitOk;
      if (!resolve_paths(ctx, *paths, rc)) return rc;
      auto report = audit::verify(*paths, audit::VerifyOptions{.allow_partial = *partial});
      if (!report) return report_error(report.error());
      if (!report->ok) {
        std::printf("BROKEN %s:%llu: %s\n", report->file.c_str(),
                    static_cast<unsigned long long>(report->line), report->reason.c_str());
        std::printf("checked %llu intact lines before it\n",
                    static_cast<unsigned long long>(report->lines));
        return int(kExitCheckFailed);
      }
      std::printf("OK %llu lines in %zu files, seq %llu..%llu%s\n",
                  static_cast<unsigned long long>(report->lines), report->files.size(),
                  static_cast<unsigned long long>(report->first_seq),
                  static_cast<unsigned long long>(report->last_seq),
                  report->partial ? " (partial: the first link was not checked)" : "");
      std::printf("head %s\n", report->head.c_str());
      if (report->recoveries > 0)
        std::printf("note: %llu audit_recovered event(s): torn lines were cut after a crash\n",
                    static_cast<unsigned long long>(report->recoveries));
      return int(kExitOk);
    });
  }

  // query
  {
    auto* cmd = audit->add_subcommand("query", "print audit lines matching filters");
    struct Args {
      std::vector<std::string> paths;
      std::string since, until, sandbox, decision, host, rule, event;
      bool json = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("--since", a->since, "from this time (RFC 3339, or a duration ago: 15m, 2h)");
    cmd->add_option("--until", a->until, "before this time (RFC 3339, or a duration ago)");
    cmd->add_option("--sandbox", a->sandbox, "sandbox id");
    cmd->add_option("--decision", a->decision, "allow | deny");
    cmd->add_option("--host", a->host, "host (case-insensitive; *.example.com for subdomains)");
    cmd->add_option("--rule", a->rule, "rule id (destination/route)");
    cmd->add_option("--event", a->event, "event name (request, connection_refused, ...)");
    cmd->add_flag("--json", a->json, "print the matching lines as they are (JSONL)");
    cmd->add_option("FILE|DIR", a->paths,
                    "log files or directories (default: the state's audit dir)");
    on_run(cmd, ctx, [&ctx, a]() {
      int rc = kExitOk;
      if (!resolve_paths(ctx, a->paths, rc)) return rc;
      audit::QueryFilter f;
      if (!a->since.empty() && !(f.since = parse_time_arg(a->since)))
        return report_error("--since: '" + a->since + "' is not a time or a duration", kExitUsage);
      if (!a->until.empty() && !(f.until = parse_time_arg(a->until)))
        return report_error("--until: '" + a->until + "' is not a time or a duration", kExitUsage);
      auto set = [](std::optional<std::string>& dst, const std::string& v) {
        if (!v.empty()) dst = v;
      };
      set(f.sandbox, a->sandbox);
      set(f.decision, a->decision);
      set(f.host, a->host);
      set(f.rule, a->rule);
      set(f.event, a->event);
      if (!a->json)
        std::printf("%-27s  %-12s  %-8s  %-48s  %-24s  %s\n", "TIME", "SANDBOX", "DECISION",
                    "REQUEST", "RULE", "REASON");
      bool json = a->json;
      auto stats = audit::query(a->paths, f, [json](const audit::Record& r) {
        if (json) {
          std::fwrite(r.line().data(), 1, r.line().size(), stdout);
          std::fputc('\n', stdout);
          return true;
        }
        std::string request;
        auto method = r.get("method"), host = r.get("host"), path = r.get("path");
        if (method && !method->empty()) request += printable(*method) + " ";
        if (host) request += printable(*host);
        if (path) request += printable(*path);
        if (request.empty()) {
          // Not an HTTP request: a dropped packet (protocol and destination) or a refused TLS
          // connection (its SNI), so that the table still says what was attempted.
          auto protocol = r.get("protocol"), dst = r.get("dst"), sni = r.get("sni");
          if (protocol && !protocol->empty())
            request = printable(*protocol) + (dst ? " " + printable(*dst) : "");
          else if (sni && !sni->empty())
            request = "TLS " + printable(*sni);
          else
            request = "-";
        }
        std::printf("%-27s  %-12s  %-8s  %-48s  %-24s  %s\n", or_dash(r.get("ts")).c_str(),
                    or_dash(r.get("sandbox")).c_str(), or_dash(r.get("decision")).c_str(),
                    request.c_str(), or_dash(r.get("rule")).c_str(),
                    or_dash(r.get("reason")).c_str());
        return true;
      });
      if (!stats) return report_error(stats.error());
      std::fprintf(stderr, "%llu of %llu lines matched\n",
                   static_cast<unsigned long long>(stats->matched),
                   static_cast<unsigned long long>(stats->lines));
      if (stats->invalid > 0)
        std::fprintf(stderr,
                     "warning: %llu lines are not audit records; run 'cordon audit verify'\n",
                     static_cast<unsigned long long>(stats->invalid));
      return int(kExitOk);
    });
  }

  // append
  {
    auto* cmd = audit->add_subcommand(
        "append", "append an event (operators' notes, demos); refused while the gateway writes");
    struct Args {
      std::string event, sandbox, decision, reason, rule;
      std::vector<std::string> fields;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("--event", a->event, "event name")->required();
    cmd->add_option("--sandbox", a->sandbox, "sandbox id");
    cmd->add_option("--decision", a->decision, "allow | deny");
    cmd->add_option("--reason", a->reason, "free text");
    cmd->add_option("--rule", a->rule, "rule id");
    cmd->add_option("KEY=VALUE", a->fields, "event fields (string values)");
    on_run(cmd, ctx, [&ctx, a]() {
      audit::Event e;
      e.event = a->event;
      e.sandbox = a->sandbox;
      e.decision = a->decision;
      e.reason = a->reason;
      e.rule = a->rule;
      for (const auto& kv : a->fields) {
        size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
          return report_error("'" + kv + "' is not KEY=VALUE", kExitUsage);
        e.add(kv.substr(0, eq), kv.substr(eq + 1));
      }
      StateDir state = ctx.state();
      if (!is_dir(state.root))
        return report_error("state directory " + state.root +
                            " does not exist; run 'cordon init' or pass --state DIR");
      audit::WriterOptions o;
      o.dir = state.audit_dir();
      auto writer = audit::Writer::open(o);
      if (!writer) return report_error(writer.error());
      auto seq = (*writer)->append(e);
      if (!seq) return report_error(seq.error(), kExitUsage);
      if (auto s = (*writer)->close(); !s) return report_error(s.error());
      std::printf("appended seq %llu\n", static_cast<unsigned long long>(*seq));
      return int(kExitOk);
    });
  }
}

}  // namespace cordon::cli
