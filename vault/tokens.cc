// Proxy tokens: issue, list, revoke, and the gateway's per-request lookup.
//
// A token is "cdn_<id>_<secret>": the id (64 random bits, hex) names the row, the secret part
// (256 random bits, base64url) is checked against its stored SHA-256 in constant time. A
// plain hash is enough: the input has full entropy, so there is nothing to brute-force.
//
// The lookup path keeps verified rows in a cache that it revalidates on every call through
// PRAGMA data_version (see detail/impl.h): a revocation committed by any process is seen by the
// next lookup, at the cost of one in-memory wal-index check. try_lookup_token answers from that
// cache only and says "would block" where lookup_token would read the database.
#include "common/crypto.h"
#include "common/encoding.h"
#include "vault/detail/impl.h"
#include "vault/limits.h"
#include "vault/vault.h"

namespace cordon::vault {

using detail::Stmt;
using detail::Transaction;

const char* to_string(TokenRefusal r) {
  switch (r) {
    case TokenRefusal::kMalformed:
      return "malformed";
    case TokenRefusal::kUnknown:
      return "unknown";
    case TokenRefusal::kRevoked:
      return "revoked";
    case TokenRefusal::kExpired:
      return "expired";
    case TokenRefusal::kWrongSandbox:
      return "wrong_sandbox";
    case TokenRefusal::kStoreError:
      return "store_error";
  }
  return "unknown";
}

bool looks_like_token(std::string_view text) {
  return detail::parse_credential(text, "cdn").has_value();
}

Result<IssuedToken> Vault::issue_token(const TokenIssue& request) {
  if (auto s = validate_name("credential name", request.credential); !s) return fail(s.error());
  if (request.sandbox) {
    if (auto s = validate_sandbox_id(*request.sandbox); !s) return fail(s.error());
  }
  if (auto s = detail::validate_note(request.note); !s) return fail(s.error());
  if (request.ttl && (request.ttl->count() <= 0 || *request.ttl > kMaxTokenTtl))
    return fail("token ttl must be between 1s and " + std::to_string(kMaxTokenTtl.count()) + "s",
                code(ErrorCode::kInvalidArgument));

  const SystemTime now = impl_->now();
  IssuedToken out;
  out.id = detail::new_id();
  std::string secret = detail::new_secret();
  if (request.ttl) out.expires = now + *request.ttl;
  std::string text = "cdn_" + out.id + "_" + secret;
  std::string hash = detail::fast_sha256(secret);
  out.token = SecretValue::take(text);
  SecretValue wipe_secret = SecretValue::take(secret);

  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "INSERT INTO tokens(id, secret_hash, credential, sandbox, expires_us, note, created_us) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!st) return detail::store_error("issuing a token", st.error());
  st->bind(1, out.id)
      .bind_blob(2, hash)
      .bind(3, request.credential)
      .bind(4, request.sandbox)
      .bind(5, out.expires ? std::optional<int64_t>(detail::to_micros(*out.expires)) : std::nullopt)
      .bind(6, request.note)
      .bind(7, detail::to_micros(now));
  if (auto s = st->run(); !s) return detail::store_error("issuing a token", s.error());
  return out;
}

Result<std::vector<TokenInfo>> Vault::list_tokens() {
  // Write pending last-used times first so that the list shows them.
  (void)flush_last_used();  // informational data: a busy database must not block the list
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "SELECT id, credential, sandbox, expires_us, created_us, revoked_us, last_used_us, note "
      "FROM tokens ORDER BY created_us, id");
  if (!st) return detail::store_error("listing tokens", st.error());
  std::vector<TokenInfo> out;
  for (;;) {
    auto row = st->step();
    if (!row) return detail::store_error("listing tokens", row.error());
    if (!*row) break;
    TokenInfo t;
    t.id = st->text(0);
    t.credential = st->text(1);
    t.sandbox = st->opt_text(2);
    t.expires = detail::from_micros(st->opt_integer(3));
    t.created = detail::from_micros(st->integer(4));
    t.revoked = detail::from_micros(st->opt_integer(5));
    t.last_used = detail::from_micros(st->opt_integer(6));
    t.note = st->text(7);
    out.push_back(std::move(t));
  }
  return out;
}

Status Vault::revoke_token(std::string_view id) {
  if (auto s = detail::validate_id("token", id); !s) return s;
  std::lock_guard lock(impl_->admin_mu);
  auto st =
      impl_->admin.prepare("UPDATE tokens SET revoked_us = coalesce(revoked_us, ?2) WHERE id = ?1");
  if (!st) return detail::store_error("revoking a token", st.error());
  st->bind(1, id).bind(2, detail::to_micros(impl_->now()));
  if (auto s = st->run(); !s) return detail::store_error("revoking a token", s.error());
  if (impl_->admin.changes() == 0)
    return fail("no token with id " + std::string(id), code(ErrorCode::kNotFound));
  return {};
}

namespace {

// A presented token, parsed and hashed (outside any lock: hashing is the most expensive step
// and needs no shared state).
struct Presented {
  std::string_view id;
  std::string hash;
  SystemTime now;
};

// The cached row for `p`, when the caches may be used without touching SQLite; else nullptr.
std::shared_ptr<const detail::CachedToken> cached_token(Vault::Impl& impl, const Presented& p) {
  std::lock_guard lock(impl.cache_mu);
  if (!impl.caches_fresh_locked(std::chrono::steady_clock::now())) return nullptr;
  auto it = impl.token_cache.find(p.id);
  return it == impl.token_cache.end() ? nullptr : it->second;
}

// The answer for a known row, the same whichever path found it.
TokenLookup judge(Vault::Impl& impl, const detail::CachedToken& entry, const Presented& p,
                  std::string_view sandbox_id) {
  // A wrong secret part is reported exactly like an unknown id: no oracle for valid ids.
  if (!constant_time_equal(p.hash, entry.secret_hash))
    return TokenLookup::refused(TokenRefusal::kUnknown);
  if (entry.revoked) return TokenLookup::refused(TokenRefusal::kRevoked);
  const TokenGrant& g = *entry.grant;
  if (g.expires && p.now >= *g.expires) return TokenLookup::refused(TokenRefusal::kExpired);
  if (g.sandbox && *g.sandbox != sandbox_id)
    return TokenLookup::refused(TokenRefusal::kWrongSandbox);

  // Record the use; written later by the flusher thread, never on this path.
  impl.start_flusher();
  {
    std::lock_guard lock(impl.usage_mu);
    int64_t& slot = impl.pending_last_used[g.token_id];
    slot = std::max(slot, detail::to_micros(p.now));
  }
  return TokenLookup::granted(entry.grant);
}

}  // namespace

std::optional<TokenLookup> Vault::try_lookup_token(std::string_view token,
                                                   std::string_view sandbox_id) {
  auto parsed = detail::parse_credential(token, "cdn");
  if (!parsed) return TokenLookup::refused(TokenRefusal::kMalformed);
  Presented p{parsed->id, detail::fast_sha256(parsed->secret), impl_->now()};
  auto entry = cached_token(*impl_, p);
  if (!entry) return std::nullopt;
  return judge(*impl_, *entry, p, sandbox_id);
}

TokenLookup Vault::lookup_token(std::string_view token, std::string_view sandbox_id) {
  auto parsed = detail::parse_credential(token, "cdn");
  if (!parsed) return TokenLookup::refused(TokenRefusal::kMalformed);
  Presented p{parsed->id, detail::fast_sha256(parsed->secret), impl_->now()};
  std::shared_ptr<const detail::CachedToken> entry = cached_token(*impl_, p);
  if (!entry) {
    std::lock_guard hot(impl_->hot_mu);
    if (!impl_->revalidate_locked()) return TokenLookup::refused(TokenRefusal::kStoreError);
    {
      // Another thread may have read it while this one waited for hot_mu.
      std::lock_guard lock(impl_->cache_mu);
      if (auto it = impl_->token_cache.find(p.id); it != impl_->token_cache.end())
        entry = it->second;
    }
    if (!entry) {
      impl_->before_store_read();
      Stmt& st = impl_->token_stmt;
      st.bind(1, p.id);
      auto row = st.step();
      if (!row) return TokenLookup::refused(TokenRefusal::kStoreError);
      if (!*row) {
        st.reset();
        return TokenLookup::refused(TokenRefusal::kUnknown);
      }
      auto fresh = std::make_shared<detail::CachedToken>();
      fresh->secret_hash = st.blob(0);
      fresh->revoked = !st.is_null(4);
      std::string id(p.id);
      auto grant = std::make_shared<TokenGrant>();
      grant->token_id = id;
      grant->credential = st.text(1);
      grant->sandbox = st.opt_text(2);
      grant->expires = detail::from_micros(st.opt_integer(3));
      fresh->grant = std::move(grant);
      st.reset();
      entry = fresh;
      std::lock_guard lock(impl_->cache_mu);
      if (impl_->token_cache.size() >= kMaxCachedTokens) impl_->token_cache.clear();
      impl_->token_cache.emplace(std::move(id), std::move(fresh));
    }
  }
  return judge(*impl_, *entry, p, sandbox_id);
}

Status Vault::flush_last_used() {
  std::unordered_map<std::string, int64_t> batch;
  {
    std::lock_guard lock(impl_->usage_mu);
    batch.swap(impl_->pending_last_used);
  }
  if (batch.empty()) return {};
  auto put_back = [&]() {
    std::lock_guard lock(impl_->usage_mu);
    for (auto& [id, us] : batch) {
      int64_t& slot = impl_->pending_last_used[id];
      slot = std::max(slot, us);
    }
  };
  std::lock_guard lock(impl_->admin_mu);
  auto tx = Transaction::begin(impl_->admin);
  if (!tx) {
    put_back();
    return detail::store_error("recording token use", tx.error());
  }
  auto st = impl_->admin.prepare(
      "UPDATE tokens SET last_used_us = max(coalesce(last_used_us, 0), ?2) WHERE id = ?1");
  if (!st) {
    put_back();
    return detail::store_error("recording token use", st.error());
  }
  for (auto& [id, us] : batch) {
    st->bind(1, id).bind(2, us);
    if (auto s = st->run(); !s) {
      put_back();
      return detail::store_error("recording token use", s.error());
    }
    st->reset();
  }
  if (auto s = tx->commit(); !s) {
    put_back();
    return detail::store_error("recording token use", s.error());
  }
  return {};
}

void Vault::Impl::start_flusher() {
  if (options.last_used_flush_interval.count() <= 0) return;
  std::call_once(flusher_once, [this]() {
    // `this` outlives the thread: ~Vault stops and joins it before Impl is destroyed. The
    // thread needs the Vault's flush, so it goes through a small back pointer set below.
    flusher = std::thread([this]() {
      std::unique_lock lock(usage_mu);
      while (!stopping) {
        usage_cv.wait_for(lock, options.last_used_flush_interval);
        if (stopping) break;
        lock.unlock();
        if (owner) (void)owner->flush_last_used();  // retried at the next interval on failure
        lock.lock();
      }
    });
  });
}

}  // namespace cordon::vault
