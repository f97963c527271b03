// Who may talk to cordon: API keys for the sandbox API (E2B x-api-key), each bound to a policy
// profile, and sandbox registrations (a sandbox's id, profile, source address and proxy
// secret), used by the gateway to know which sandbox a connection comes from.
//
// Keys and proxy secrets are 256-bit random values; only their SHA-256 is stored. A wrong id
// and a wrong secret get the same answer.
#include <sqlite3.h>

#include "common/encoding.h"
#include "vault/detail/impl.h"
#include "vault/limits.h"
#include "vault/vault.h"

namespace cordon::vault {

using detail::Stmt;
using detail::Transaction;

// ---- API keys ----------------------------------------------------------------------------

Result<CreatedApiKey> Vault::create_api_key(std::string_view profile, std::string_view note) {
  if (auto s = validate_name("profile name", profile); !s) return fail(s.error());
  if (auto s = detail::validate_note(note); !s) return fail(s.error());
  CreatedApiKey out;
  out.id = detail::new_id();
  out.profile = std::string(profile);
  std::string secret = detail::new_secret();
  std::string text = "cak_" + out.id + "_" + secret;
  std::string hash = detail::fast_sha256(secret);
  out.key = SecretValue::take(text);
  SecretValue wipe_secret = SecretValue::take(secret);

  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "INSERT INTO api_keys(id, secret_hash, profile, note, created_us) VALUES (?1, ?2, ?3, ?4, "
      "?5)");
  if (!st) return detail::store_error("creating an API key", st.error());
  st->bind(1, out.id)
      .bind_blob(2, hash)
      .bind(3, profile)
      .bind(4, note)
      .bind(5, detail::to_micros(impl_->now()));
  if (auto s = st->run(); !s) return detail::store_error("creating an API key", s.error());
  return out;
}

Result<std::vector<ApiKeyInfo>> Vault::list_api_keys() {
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "SELECT id, profile, note, created_us, revoked_us FROM api_keys ORDER BY created_us, id");
  if (!st) return detail::store_error("listing API keys", st.error());
  std::vector<ApiKeyInfo> out;
  for (;;) {
    auto row = st->step();
    if (!row) return detail::store_error("listing API keys", row.error());
    if (!*row) break;
    out.push_back(ApiKeyInfo{st->text(0), st->text(1), st->text(2),
                             detail::from_micros(st->integer(3)),
                             detail::from_micros(st->opt_integer(4))});
  }
  return out;
}

Status Vault::revoke_api_key(std::string_view id) {
  if (auto s = detail::validate_id("API key", id); !s) return s;
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "UPDATE api_keys SET revoked_us = coalesce(revoked_us, ?2) WHERE id = ?1");
  if (!st) return detail::store_error("revoking an API key", st.error());
  st->bind(1, id).bind(2, detail::to_micros(impl_->now()));
  if (auto s = st->run(); !s) return detail::store_error("revoking an API key", s.error());
  if (impl_->admin.changes() == 0)
    return fail("no API key with id " + std::string(id), code(ErrorCode::kNotFound));
  return {};
}

Result<ApiKeyGrant> Vault::verify_api_key(std::string_view key) {
  auto parsed = detail::parse_credential(key, "cak");
  if (!parsed) return fail("malformed API key", code(ErrorCode::kRefused));
  const std::string hash = detail::fast_sha256(parsed->secret);
  std::lock_guard lock(impl_->hot_mu);
  Stmt& st = impl_->api_key_stmt;
  st.bind(1, parsed->id);
  auto row = st.step();
  if (!row) return detail::store_error("verifying an API key", row.error());
  if (!*row) {
    st.reset();
    return fail("unknown API key", code(ErrorCode::kRefused));
  }
  bool match = constant_time_equal(hash, st.blob(0));
  ApiKeyGrant grant{std::string(parsed->id), st.text(1)};
  bool revoked = !st.is_null(2);
  st.reset();
  if (!match) return fail("unknown API key", code(ErrorCode::kRefused));
  if (revoked) return fail("API key " + grant.id + " is revoked", code(ErrorCode::kRefused));
  return grant;
}

// ---- sandbox registrations -----------------------------------------------------------------

namespace {

SandboxInfo sandbox_row(const Stmt& st) {
  return SandboxInfo{st.text(0), st.text(1), st.opt_text(2), detail::from_micros(st.integer(3))};
}

}  // namespace

Result<RegisteredSandbox> Vault::register_sandbox(std::string_view id, std::string_view profile,
                                                  std::optional<std::string_view> address) {
  if (auto s = validate_sandbox_id(id); !s) return fail(s.error());
  if (auto s = validate_name("profile name", profile); !s) return fail(s.error());
  std::optional<std::string> addr;
  if (address) {
    auto c = canonical_ip(*address);
    if (!c) return fail(c.error());
    addr = std::move(*c);
  }
  RegisteredSandbox out;
  out.info = SandboxInfo{std::string(id), std::string(profile), addr, impl_->now()};
  std::string text = "cps_" + detail::new_secret();
  std::string hash = detail::fast_sha256(text);
  out.proxy_secret = SecretValue::take(text);

  const std::string ctx = "registering sandbox '" + std::string(id) + "'";
  std::lock_guard lock(impl_->admin_mu);
  auto tx = Transaction::begin(impl_->admin);
  if (!tx) return detail::store_error(ctx, tx.error());
  // Look for conflicts first, to name them; the UNIQUE constraints still guard the race.
  auto q = impl_->admin.prepare("SELECT id, address FROM sandboxes WHERE id = ?1 OR address = ?2");
  if (!q) return detail::store_error(ctx, q.error());
  q->bind(1, id).bind(2, addr);
  auto row = q->step();
  if (!row) return detail::store_error(ctx, row.error());
  if (*row) {
    if (q->text(0) == id)
      return fail("sandbox '" + std::string(id) + "' is already registered",
                  code(ErrorCode::kExists));
    return fail("address " + *addr + " is already registered to sandbox '" + q->text(0) + "'",
                code(ErrorCode::kExists));
  }
  q->reset();
  auto st = impl_->admin.prepare(
      "INSERT INTO sandboxes(id, profile, address, secret_hash, created_us) "
      "VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!st) return detail::store_error(ctx, st.error());
  st->bind(1, id)
      .bind(2, profile)
      .bind(3, addr)
      .bind_blob(4, hash)
      .bind(5, detail::to_micros(out.info.created));
  if (auto s = st->run(); !s) {
    if ((s.error().code & 0xff) == SQLITE_CONSTRAINT)
      return fail(ctx + ": id or address already registered", code(ErrorCode::kExists));
    return detail::store_error(ctx, s.error());
  }
  if (auto s = tx->commit(); !s) return detail::store_error(ctx, s.error());
  return out;
}

Result<std::vector<SandboxInfo>> Vault::list_sandboxes() {
  std::lock_guard lock(impl_->admin_mu);
  auto st =
      impl_->admin.prepare("SELECT id, profile, address, created_us FROM sandboxes ORDER BY id");
  if (!st) return detail::store_error("listing sandboxes", st.error());
  std::vector<SandboxInfo> out;
  for (;;) {
    auto row = st->step();
    if (!row) return detail::store_error("listing sandboxes", row.error());
    if (!*row) break;
    out.push_back(sandbox_row(*st));
  }
  return out;
}

Status Vault::unregister_sandbox(std::string_view id) {
  if (auto s = validate_sandbox_id(id); !s) return s;
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare("DELETE FROM sandboxes WHERE id = ?1");
  if (!st) return detail::store_error("unregistering a sandbox", st.error());
  st->bind(1, id);
  if (auto s = st->run(); !s) return detail::store_error("unregistering a sandbox", s.error());
  if (impl_->admin.changes() == 0)
    return fail("no sandbox '" + std::string(id) + "' is registered", code(ErrorCode::kNotFound));
  return {};
}

namespace {

using SandboxCache = decltype(Vault::Impl::sandbox_by_id_cache);
using SandboxEntry = std::shared_ptr<const detail::CachedSandbox>;

// The cached entry for `key`, when the caches may be used without touching SQLite.
SandboxEntry cached_sandbox(Vault::Impl& impl, SandboxCache& cache, std::string_view key) {
  std::lock_guard lock(impl.cache_mu);
  if (!impl.caches_fresh_locked(std::chrono::steady_clock::now())) return nullptr;
  auto it = cache.find(key);
  return it == cache.end() ? nullptr : it->second;
}

// The entry for `key` from the cache or, on a miss, from `st` (one bound parameter, columns as
// sandbox_row plus secret_hash), cached. Reads SQLite: may block.
Result<SandboxEntry> load_sandbox(Vault::Impl& impl, SandboxCache& cache, Stmt& st,
                                  std::string_view key, const char* context) {
  if (auto hit = cached_sandbox(impl, cache, key)) return hit;
  std::lock_guard hot(impl.hot_mu);
  if (auto s = impl.revalidate_locked(); !s) return fail(s.error());
  {
    // Another thread may have read it while this one waited for hot_mu.
    std::lock_guard lock(impl.cache_mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  impl.before_store_read();
  st.bind(1, key);
  auto row = st.step();
  if (!row) {
    st.reset();
    return detail::store_error(context, row.error());
  }
  auto fresh = std::make_shared<detail::CachedSandbox>();
  if (*row) {
    fresh->found = true;
    fresh->info = sandbox_row(st);
    fresh->secret_hash = st.blob(4);
  }
  st.reset();
  std::lock_guard lock(impl.cache_mu);
  if (cache.size() >= kMaxCachedSandboxes) cache.clear();
  cache.emplace(std::string(key), fresh);
  return SandboxEntry(std::move(fresh));
}

std::optional<SandboxInfo> by_address_answer(const detail::CachedSandbox& e) {
  if (!e.found) return std::nullopt;
  return e.info;
}

Result<SandboxInfo> verify_answer(const detail::CachedSandbox& e, const std::string& hash) {
  // Unknown id and wrong secret get the same answer; the comparison runs in both cases.
  bool match = constant_time_equal(hash, e.secret_hash);
  if (!e.found || !match)
    return fail("invalid sandbox id or proxy secret", code(ErrorCode::kRefused));
  return e.info;
}

}  // namespace

std::optional<Result<std::optional<SandboxInfo>>> Vault::try_sandbox_by_address(
    std::string_view ip) {
  auto addr = canonical_ip(ip);
  if (!addr) return Result<std::optional<SandboxInfo>>(fail(addr.error()));
  auto entry = cached_sandbox(*impl_, impl_->sandbox_by_address_cache, *addr);
  if (!entry) return std::nullopt;
  return Result<std::optional<SandboxInfo>>(by_address_answer(*entry));
}

Result<std::optional<SandboxInfo>> Vault::sandbox_by_address(std::string_view ip) {
  auto addr = canonical_ip(ip);
  if (!addr) return fail(addr.error());
  auto entry = load_sandbox(*impl_, impl_->sandbox_by_address_cache, impl_->sandbox_by_address_stmt,
                            *addr, "looking up a sandbox by address");
  if (!entry) return fail(entry.error());
  return by_address_answer(**entry);
}

std::optional<Result<SandboxInfo>> Vault::try_verify_sandbox(std::string_view id,
                                                             std::string_view proxy_secret) {
  const std::string hash = detail::fast_sha256(proxy_secret);
  if (!validate_sandbox_id(id))
    return Result<SandboxInfo>(
        fail("invalid sandbox id or proxy secret", code(ErrorCode::kRefused)));
  auto entry = cached_sandbox(*impl_, impl_->sandbox_by_id_cache, id);
  if (!entry) return std::nullopt;
  return verify_answer(*entry, hash);
}

Result<SandboxInfo> Vault::verify_sandbox(std::string_view id, std::string_view proxy_secret) {
  const std::string hash = detail::fast_sha256(proxy_secret);
  if (!validate_sandbox_id(id))
    return fail("invalid sandbox id or proxy secret", code(ErrorCode::kRefused));
  auto entry = load_sandbox(*impl_, impl_->sandbox_by_id_cache, impl_->sandbox_by_id_stmt, id,
                            "verifying a sandbox");
  if (!entry) return fail(entry.error());
  return verify_answer(**entry, hash);
}

}  // namespace cordon::vault
