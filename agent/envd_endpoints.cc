#include "agent/envd_endpoints.h"

#include <sys/statfs.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace cordon::agent {

namespace {

constexpr size_t kMaxInitBody = 4 * 1024 * 1024;  // a CA bundle plus env vars

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct CpuSample {
  uint64_t idle = 0;
  uint64_t total = 0;
};

CpuSample read_cpu() {
  std::ifstream in("/proc/stat");
  std::string label;
  CpuSample s;
  in >> label;
  if (label != "cpu") return s;
  uint64_t v;
  for (int i = 0; i < 10 && (in >> v); ++i) {
    s.total += v;
    if (i == 3 || i == 4) s.idle += v;  // idle + iowait
  }
  return s;
}

std::map<std::string, uint64_t> read_meminfo() {
  std::ifstream in("/proc/meminfo");
  std::map<std::string, uint64_t> out;
  std::string key;
  uint64_t kb;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (ls >> key >> kb) {
      if (!key.empty() && key.back() == ':') key.pop_back();
      out[key] = kb * 1024;
    }
  }
  return out;
}

void do_metrics(http::Exchange& ex) {
  CpuSample a = read_cpu();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CpuSample b = read_cpu();
  double pct = 0;
  if (b.total > a.total) {
    pct = 100.0 * (1.0 - double(b.idle - a.idle) / double(b.total - a.total));
  }
  auto mem = read_meminfo();
  uint64_t total = mem["MemTotal"];
  uint64_t avail = mem.count("MemAvailable") ? mem["MemAvailable"] : mem["MemFree"];
  struct statfs fs {};
  uint64_t disk_total = 0, disk_used = 0;
  if (::statfs("/", &fs) == 0) {
    disk_total = uint64_t(fs.f_blocks) * uint64_t(fs.f_frsize);
    disk_used = (uint64_t(fs.f_blocks) - uint64_t(fs.f_bfree)) * uint64_t(fs.f_frsize);
  }
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  nlohmann::json j = {
      {"ts", std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count()},
      {"cpu_count", cpus > 0 ? cpus : 1},
      {"cpu_used_pct", std::round(pct * 100) / 100},
      {"mem_total", total},
      {"mem_used", total > avail ? total - avail : 0},
      {"disk_used", disk_used},
      {"disk_total", disk_total},
  };
  (void)ex.respond(200, {{"Content-Type", "application/json"}}, dump(j));
}

void do_init(http::Exchange& ex, AgentState& state) {
  std::string body;
  char buf[16 * 1024];
  while (true) {
    auto n = ex.read_body(buf, sizeof(buf));
    if (!n) {
      (void)http::respond_json_error(ex, 400, "reading the /init body: " + n.error().message);
      return;
    }
    if (*n == 0) break;
    body.append(buf, *n);
    if (body.size() > kMaxInitBody) {
      (void)http::respond_json_error(ex, 413, "/init body larger than 4 MiB");
      return;
    }
  }
  InitSettings s = state.settings();
  s.ca_bundle.reset();
  if (!body.empty()) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      (void)http::respond_json_error(ex, 400, "/init body is not a JSON object");
      return;
    }
    auto str = [&](const char* key, std::optional<std::string>& out) -> bool {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) return true;
      if (!it->is_string()) return false;
      out = it->get<std::string>();
      return true;
    };
    std::optional<std::string> token, user, workdir, ca;
    if (!str("accessToken", token) || !str("defaultUser", user) ||
        !str("defaultWorkdir", workdir) || !str("caBundle", ca)) {
      (void)http::respond_json_error(ex, 400,
                                     "/init: accessToken, defaultUser, defaultWorkdir and "
                                     "caBundle must be strings");
      return;
    }
    if (auto it = j.find("envVars"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) {
        (void)http::respond_json_error(ex, 400, "/init: envVars must be an object of strings");
        return;
      }
      for (const auto& [k, v] : it->items()) {
        if (!v.is_string()) {
          (void)http::respond_json_error(ex, 400, "/init: envVars." + k + " is not a string");
          return;
        }
        s.env_vars[k] = v.get<std::string>();
      }
    }
    if (token && !token->empty()) s.access_token = *token;
    if (user && !user->empty()) {
      if (auto u = state.user(*user); !u) {
        (void)http::respond_json_error(ex, 400, "/init defaultUser: " + u.error().message);
        return;
      }
      s.default_user = *user;
    }
    if (workdir && !workdir->empty()) s.default_workdir = *workdir;
    if (ca && !ca->empty()) s.ca_bundle = *ca;
  }
  if (auto st = state.apply_init(s); !st) {
    (void)http::respond_json_error(ex, 500, st.error().message);
    return;
  }
  (void)ex.respond(204, {}, {});
}

bool is_files_path(const std::string& p) {
  return p == "/files" || p.rfind("/files/", 0) == 0;
}

}  // namespace

void register_envd_endpoints(http::Router& router, AgentState& state) {
  router.add("/health", [](http::Exchange& ex) { (void)ex.respond(204, {}, {}); });
  router.add("/envs", [&state](http::Exchange& ex) {
    if (ex.head().method != "GET") {
      (void)http::respond_json_error(ex, 405, "use GET on /envs");
      return;
    }
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : state.settings().env_vars) j[k] = v;
    (void)ex.respond(200, {{"Content-Type", "application/json"}}, dump(j));
  });
  router.add("/metrics", [](http::Exchange& ex) {
    if (ex.head().method != "GET") {
      (void)http::respond_json_error(ex, 405, "use GET on /metrics");
      return;
    }
    do_metrics(ex);
  });
  router.add("/init", [&state](http::Exchange& ex) {
    if (ex.head().method != "POST") {
      (void)http::respond_json_error(ex, 405, "use POST on /init");
      return;
    }
    do_init(ex, state);
  });
}

bool check_access(http::Exchange& ex, const AgentState& state) {
  const auto& head = ex.head();
  if (head.path == "/health" && head.method == "GET") return true;
  if (is_files_path(head.path)) return true;
  if (state.token_ok(head)) return true;
  (void)http::respond_json_error(
      ex, 401,
      "unauthorized access, please provide a valid access token or method signing if supported");
  return false;
}

}  // namespace cordon::agent
