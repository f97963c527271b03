// SQLite implementation of SandboxRegistry: one row per sandbox; maps and lists as JSON text.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

#include "sandbox/manager/registry.h"

namespace cordon::sandbox {

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kCreating:
      return "creating";
    case Phase::kPooled:
      return "pooled";
    case Phase::kRunning:
      return "running";
    case Phase::kPaused:
      return "paused";
    case Phase::kDestroying:
      return "destroying";
  }
  return "creating";
}

namespace {

using nlohmann::json;

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  phase TEXT NOT NULL,
  node TEXT NOT NULL,
  backend TEXT NOT NULL,
  template_id TEXT NOT NULL,
  template_alias TEXT NOT NULL,
  profile TEXT NOT NULL,
  owner TEXT NOT NULL,
  started_at_ms INTEGER NOT NULL,
  end_at_ms INTEGER NOT NULL,
  on_timeout TEXT NOT NULL,
  metadata TEXT NOT NULL,
  env_vars TEXT NOT NULL,
  network TEXT NOT NULL,
  resources TEXT NOT NULL,
  envd_access_token TEXT NOT NULL,
  envd_version TEXT NOT NULL,
  address TEXT NOT NULL,
  address6 TEXT NOT NULL,
  gateway TEXT NOT NULL,
  gateway6 TEXT NOT NULL,
  netns TEXT NOT NULL,
  host_interface TEXT NOT NULL,
  cgroup TEXT NOT NULL,
  container_id TEXT NOT NULL,
  dir TEXT NOT NULL,
  host_pids TEXT NOT NULL
);
)sql";

Phase phase_from(const std::string& s) {
  for (Phase p :
       {Phase::kCreating, Phase::kPooled, Phase::kRunning, Phase::kPaused, Phase::kDestroying})
    if (phase_name(p) == s) return p;
  return Phase::kCreating;  // unknown: treated as half-made, i.e. reaped
}

int64_t to_ms(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
SystemTime from_ms(int64_t ms) {
  return SystemTime(std::chrono::milliseconds(ms));
}

json map_json(const std::map<std::string, std::string>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}
std::map<std::string, std::string> json_map(const std::string& text) {
  std::map<std::string, std::string> out;
  json j = json::parse(text, nullptr, false);
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it->is_string()) out[it.key()] = it->get<std::string>();
  return out;
}

class SqliteRegistry final : public SandboxRegistry {
 public:
  explicit SqliteRegistry(sqlite3* db) : db_(db) {}
  ~SqliteRegistry() override { sqlite3_close(db_); }

  Status put(const StoredSandbox& s) override {
    std::lock_guard lk(mu_);
    const SandboxRecord& r = s.record;
    json net = {{"allow_out", r.network.allow_out},
                {"deny_out", r.network.deny_out},
                {"internet", r.network.internet}};
    json res = {{"cpu_millis", r.resources.cpu_millis},
                {"memory_bytes", r.resources.memory_bytes},
                {"pids", r.resources.pids},
                {"disk_bytes", r.resources.disk_bytes}};
    json pids = s.host_pids;
    std::vector<std::string> text = {r.id,
                                     std::string(phase_name(s.phase)),
                                     s.node,
                                     r.backend,
                                     r.template_id,
                                     r.template_alias,
                                     r.profile,
                                     r.owner,
                                     "",  // started_at (integer, bound below)
                                     "",  // end_at
                                     r.on_timeout == TimeoutAction::kPause ? "pause" : "kill",
                                     map_json(r.metadata).dump(),
                                     map_json(r.env_vars).dump(),
                                     net.dump(),
                                     res.dump(),
                                     r.envd_access_token,
                                     r.envd_version,
                                     r.address,
                                     s.ipv6,
                                     s.gateway_ipv4,
                                     s.gateway_ipv6,
                                     s.netns,
                                     s.host_interface,
                                     s.cgroup,
                                     s.container_id,
                                     s.dir,
                                     pids.dump()};
    sqlite3_stmt* st = nullptr;
    std::string sql = "INSERT OR REPLACE INTO sandboxes VALUES (";
    for (size_t i = 0; i < text.size(); ++i) sql += i ? ",?" : "?";
    sql += ")";
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      return fail("sandbox registry: prepare insert: " + std::string(sqlite3_errmsg(db_)));
    for (size_t i = 0; i < text.size(); ++i) {
      int col = static_cast<int>(i) + 1;
      if (i == 8)
        sqlite3_bind_int64(st, col, to_ms(r.started_at));
      else if (i == 9)
        sqlite3_bind_int64(st, col, to_ms(r.end_at));
      else
        sqlite3_bind_text(st, col, text[i].c_str(), static_cast<int>(text[i].size()),
                          SQLITE_TRANSIENT);
    }
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return fail("sandbox registry: write " + r.id + ": " + std::string(sqlite3_errmsg(db_)));
    return {};
  }

  Status remove(const std::string& id) override {
    std::lock_guard lk(mu_);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "DELETE FROM sandboxes WHERE id = ?", -1, &st, nullptr) !=
        SQLITE_OK)
      return fail("sandbox registry: prepare delete: " + std::string(sqlite3_errmsg(db_)));
    sqlite3_bind_text(st, 1, id.c_str(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return fail("sandbox registry: delete " + id + ": " + std::string(sqlite3_errmsg(db_)));
    return {};
  }

  Result<std::vector<StoredSandbox>> list() override {
    std::lock_guard lk(mu_);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT * FROM sandboxes ORDER BY started_at_ms", -1, &st,
                           nullptr) != SQLITE_OK)
      return fail("sandbox registry: prepare list: " + std::string(sqlite3_errmsg(db_)));
    std::vector<StoredSandbox> out;
    auto col = [&](int i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      StoredSandbox s;
      SandboxRecord& r = s.record;
      r.id = col(0);
      s.phase = phase_from(col(1));
      s.node = col(2);
      r.backend = col(3);
      r.template_id = col(4);
      r.template_alias = col(5);
      r.profile = col(6);
      r.owner = col(7);
      r.started_at = from_ms(sqlite3_column_int64(st, 8));
      r.end_at = from_ms(sqlite3_column_int64(st, 9));
      r.on_timeout = col(10) == "pause" ? TimeoutAction::kPause : TimeoutAction::kKill;
      r.metadata = json_map(col(11));
      r.env_vars = json_map(col(12));
      json net = json::parse(col(13), nullptr, false);
      if (net.is_object()) {
        r.network.allow_out = net.value("allow_out", std::vector<std::string>{});
        r.network.deny_out = net.value("deny_out", std::vector<std::string>{});
        r.network.internet = net.value("internet", true);
      }
      json res = json::parse(col(14), nullptr, false);
      if (res.is_object()) {
        r.resources.cpu_millis = res.value("cpu_millis", r.resources.cpu_millis);
        r.resources.memory_bytes = res.value("memory_bytes", r.resources.memory_bytes);
        r.resources.pids = res.value("pids", r.resources.pids);
        r.resources.disk_bytes = res.value("disk_bytes", r.resources.disk_bytes);
      }
      r.envd_access_token = col(15);
      r.envd_version = col(16);
      r.address = col(17);
      s.ipv6 = col(18);
      s.gateway_ipv4 = col(19);
      s.gateway_ipv6 = col(20);
      s.netns = col(21);
      s.host_interface = col(22);
      s.cgroup = col(23);
      s.container_id = col(24);
      s.dir = col(25);
      json pids = json::parse(col(26), nullptr, false);
      if (pids.is_array())
        for (const auto& p : pids)
          if (p.is_number_integer()) s.host_pids.push_back(p.get<int>());
      r.state = s.phase == Phase::kPaused ? SandboxState::kPaused : SandboxState::kRunning;
      out.push_back(std::move(s));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return fail("sandbox registry: list: " + std::string(sqlite3_errmsg(db_)));
    return out;
  }

 private:
  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace

Result<std::unique_ptr<SandboxRegistry>> open_sqlite_registry(const std::string& path) {
  // Created 0600 before SQLite opens it: tokens live in it.
  int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return fail("sandbox registry " + path + ": " + strerror(errno));
  fchmod(fd, 0600);
  close(fd);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail("sandbox registry " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db, 5000);
  auto exec = [&](const char* sql) -> Status {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "?";
      sqlite3_free(err);
      return fail("sandbox registry " + path + ": " + msg);
    }
    return {};
  };
  sqlite3_stmt* st = nullptr;
  int version = 0;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (version > kSchemaVersion) {
    sqlite3_close(db);
    return fail("sandbox registry " + path + ": schema version " + std::to_string(version) +
                " is newer than this cordon's (" + std::to_string(kSchemaVersion) + ")");
  }
  // synchronous=NORMAL (no fsync per commit; WAL keeps it consistent): a commit survives the
  // process being killed, only a power loss can take the last ones, and a power loss ends every
  // sandbox anyway (the next start reaps by record and sweeps by name). An fsync per state
  // change would otherwise be most of a warm-pool claim.
  for (const char* sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", kSchema, "PRAGMA user_version = 1"})
    if (auto s = exec(sql); !s) {
      sqlite3_close(db);
      return fail(s.error());
    }
  for (const std::string& side : {path + "-wal", path + "-shm"}) chmod(side.c_str(), 0600);
  return std::unique_ptr<SandboxRegistry>(new SqliteRegistry(db));
}

}  // namespace cordon::sandbox
