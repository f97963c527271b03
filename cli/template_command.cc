// `cordon template build|list|rm`: the root file systems sandboxes run in
// (sandbox/templates/template_store.h). `build` prints progress on stderr and the template id
// alone on stdout; SIGINT/SIGTERM stop it and remove what it had built.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/time_format.h"
#include "sandbox/templates/template_store.h"

namespace cordon::cli {
namespace {

using sandbox::TemplateError;

std::atomic<bool> g_cancel{false};
volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  g_signal = sig;
  g_cancel.store(true);
}

int exit_for(const Error& e) {
  switch (TemplateError(e.code)) {
    case TemplateError::kInvalidSpec:
      return kExitUsage;
    case TemplateError::kCancelled:
      return 128 + (g_signal ? int(g_signal) : SIGINT);
    default:
      return kExitFailure;
  }
}

// cordon-agent next to the cordon binary (an install), else in the build tree's agent/.
std::string default_agent() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  auto dir = self.parent_path();
  for (const auto& candidate : {dir / "cordon-agent", dir / ".." / "agent" / "cordon-agent"})
    if (::access(candidate.c_str(), X_OK) == 0)
      return std::filesystem::weakly_canonical(candidate, ec).string();
  return {};
}

bool split_pair(const std::string& s, char sep, std::string& a, std::string& b) {
  auto pos = s.find(sep);
  if (pos == std::string::npos || pos == 0) return false;
  a = s.substr(0, pos);
  b = s.substr(pos + 1);
  return true;
}

struct BuildArgs {
  std::string name, agent, start_cmd, ready_cmd;
  std::vector<std::string> packages, files, env;
};

int run_build(const CliContext& ctx, const BuildArgs& a) {
  sandbox::TemplateSpec spec;
  spec.name = a.name;
  spec.start_cmd = a.start_cmd;
  spec.ready_cmd = a.ready_cmd;
  for (const auto& p : a.packages)
    if (!p.empty()) spec.packages.push_back(p);
  for (const auto& f : a.files) {
    sandbox::TemplateFile tf;
    if (!split_pair(f, ':', tf.source, tf.destination))
      return report_error("--file " + f + ": expected SRC:DST", kExitUsage);
    tf.source = std::filesystem::absolute(tf.source).lexically_normal().string();
    spec.files.push_back(tf);
  }
  for (const auto& e : a.env) {
    std::string k, v;
    if (!split_pair(e, '=', k, v)) return report_error("--env " + e + ": expected K=V", kExitUsage);
    spec.env[k] = v;
  }
  spec.agent_binary = a.agent.empty() ? default_agent() : a.agent;
  if (spec.agent_binary.empty())
    return report_error(
        "no cordon-agent next to this cordon binary or in ../agent/; pass --agent PATH",
        kExitUsage);
  StateDir state = ctx.state();
  spec.ca_cert_pem_path = state.ca_cert();
  if (::access(spec.ca_cert_pem_path.c_str(), R_OK) != 0)
    return report_error("no root CA at " + spec.ca_cert_pem_path + "; run `cordon init` first",
                        kExitFailure);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sandbox::TemplateStore store(state);
  auto built = store.build(
      spec, [](const std::string& line) { std::fprintf(stderr, "template: %s\n", line.c_str()); },
      &g_cancel);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!built) {
    if (built.error().code == int(TemplateError::kCancelled))
      return report_error("build interrupted; nothing of it was kept", exit_for(built.error()));
    return report_error(built.error(), exit_for(built.error()));
  }
  std::printf("%s\n", built->id.c_str());
  return int(kExitOk);
}

nlohmann::json describe(const sandbox::TemplateInfo& t) {
  return {{"id", t.id},
          {"alias", t.alias},
          {"current", t.current},
          {"envd_version", t.envd_version},
          {"built_at", format_rfc3339_micros(t.built_at)},
          {"packages", t.packages},
          {"env", t.env},
          {"start_cmd", t.start_cmd},
          {"ready_cmd", t.ready_cmd},
          {"content_hash", t.content_hash},
          {"rootfs_dir", t.rootfs_dir},
          {"ext4_image", t.ext4_image},
          {"image_bytes", t.image_bytes},
          {"rootfs_bytes", t.rootfs_bytes}};
}

}  // namespace

void add_template_commands(CLI::App& app, CliContext& ctx) {
  auto* tpl = app.add_subcommand("template", "sandbox templates (root file systems)");
  tpl->require_subcommand(1);

  auto args = std::make_shared<BuildArgs>();
  auto* build = tpl->add_subcommand(
      "build",
      "build template NAME (Debian " + std::string("bookworm") +
          " with bash, coreutils, procps, python3, curl, git, ca-certificates, the agent and the "
          "root CA) or return the cached build of the same inputs; prints its id");
  build->add_option("NAME", args->name, "template name (alias), e.g. base")->required();
  build->add_option("--packages", args->packages, "more Debian packages, comma separated")
      ->delimiter(',');
  build->add_option("--file", args->files, "copy host SRC to DST in the rootfs (repeatable)")
      ->type_name("SRC:DST");
  build->add_option("--env", args->env, "default env of every process (repeatable)")
      ->type_name("K=V");
  build->add_option("--start-cmd", args->start_cmd, "run in the background at sandbox start");
  build->add_option("--ready-cmd", args->ready_cmd, "the sandbox is ready when this exits 0");
  build->add_option("--agent", args->agent,
                    "cordon-agent binary (default: next to cordon, or ../agent/cordon-agent)");
  on_run(build, ctx, [&ctx, args]() { return run_build(ctx, *args); });

  auto json_out = std::make_shared<bool>(false);
  auto* list = tpl->add_subcommand("list", "list templates (superseded builds too)");
  list->add_flag("--json", *json_out, "print JSON");
  on_run(list, ctx, [&ctx, json_out]() {
    sandbox::TemplateStore store(ctx.state());
    auto all = store.list();
    if (!all) return report_error(all.error());
    if (*json_out) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : *all) out.push_back(describe(t));
      std::printf("%s\n", out.dump(2).c_str());
      return int(kExitOk);
    }
    std::printf("%-20s  %-16s  %-7s  %-20s  %-6s  %8s\n", "ID", "NAME", "CURRENT", "BUILT", "ENVD",
                "IMAGE");
    for (const auto& t : *all) {
      std::string built = format_rfc3339_micros(t.built_at).substr(0, 19);
      std::printf("%-20s  %-16s  %-7s  %-20s  %-6s  %6lluMi\n", t.id.c_str(), t.alias.c_str(),
                  t.current ? "yes" : "no", built.c_str(), t.envd_version.c_str(),
                  static_cast<unsigned long long>(t.image_bytes >> 20));
    }
    return int(kExitOk);
  });

  auto rm_name = std::make_shared<std::string>();
  auto* rm = tpl->add_subcommand(
      "rm",
      "remove a template: by name, the alias and every build made under it; by id, that build. "
      "Builds a running sandbox holds are kept");
  rm->add_option("NAME", *rm_name, "template name or id")->required();
  on_run(rm, ctx, [&ctx, rm_name]() {
    sandbox::TemplateStore store(ctx.state());
    if (auto st = store.remove(*rm_name); !st) return report_error(st.error());
    std::fprintf(stderr, "removed template %s\n", rm_name->c_str());
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
