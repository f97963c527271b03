// The store: initialization, refusals at open (key, corruption, schema), secrets at rest.
#include "vault/vault.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <fstream>

#include "common/crypto.h"
#include "common/file_io.h"
#include "vault/detail/keys.h"
#include "vault/detail/test_support.h"

namespace cordon::vault {
namespace {

using testing::TempState;
using testing::VaultTest;

mode_t mode_of(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Runs SQL on the database behind the vault's back (as an attacker or another tool would).
void raw_sql(const StateDir& state, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(state.vault_db().c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << " in " << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

int error_code(const Error& e) {
  return e.code;
}

TEST(VaultInit, CreatesPrivateDirectoryKeyAndDatabase) {
  TempState tmp;
  ASSERT_TRUE(Vault::initialize(tmp.state()));
  EXPECT_EQ(mode_of(tmp.state().root), 0700u);
  EXPECT_EQ(mode_of(tmp.state().master_key()), 0600u);
  EXPECT_EQ(mode_of(tmp.state().vault_db()), 0600u);
  EXPECT_EQ(read_file(tmp.state().master_key())->size(), 32u);
  EXPECT_TRUE(Vault::exists(tmp.state()));
  auto v = Vault::open(tmp.state());
  ASSERT_TRUE(v) << v.error().message;
}

TEST(VaultInit, RefusesToClobberAnExistingKeyOrDatabase) {
  TempState tmp;
  ASSERT_TRUE(Vault::initialize(tmp.state()));
  std::string key = *read_file(tmp.state().master_key());
  auto again = Vault::initialize(tmp.state());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, code(ErrorCode::kAlreadyInitialized));
  EXPECT_EQ(*read_file(tmp.state().master_key()), key);  // untouched

  // A database without its key is not silently given a new one either.
  ::unlink(tmp.state().master_key().c_str());
  auto orphan = Vault::initialize(tmp.state());
  ASSERT_FALSE(orphan);
  EXPECT_NE(orphan.error().message.find("vault.db"), std::string::npos);
}

TEST_F(VaultTest, RefusesMissingMasterKey) {
  vault_.reset();
  ::unlink(state().master_key().c_str());
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kBadMasterKey));
  EXPECT_NE(v.error().message.find("master.key"), std::string::npos);
}

TEST_F(VaultTest, RefusesWrongSizeMasterKey) {
  vault_.reset();
  ASSERT_TRUE(write_file_atomic(state().master_key(), std::string(31, 'k'), 0600));
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kBadMasterKey));
  EXPECT_NE(v.error().message.find("31 bytes"), std::string::npos) << v.error().message;
}

TEST_F(VaultTest, RefusesGroupOrWorldReadableMasterKey) {
  vault_.reset();
  for (mode_t m : {0644, 0640, 0604}) {
    ::chmod(state().master_key().c_str(), m);
    auto v = Vault::open(state());
    ASSERT_FALSE(v) << std::oct << m;
    EXPECT_EQ(error_code(v.error()), code(ErrorCode::kBadMasterKey));
    EXPECT_NE(v.error().message.find("chmod 600"), std::string::npos) << v.error().message;
  }
}

// A value with CR, LF or NUL would split or cut the header it is rendered into: refused when
// stored, naming the secret and the byte, never at the first request that renders it.
TEST_F(VaultTest, RefusesSecretValuesWithCrLfOrNul) {
  for (std::string bad : {std::string("ghp_a\r\nX-Evil: 1"), std::string("ghp_a\nb"),
                          std::string("ghp_a\rb"), std::string("ghp_a\0b", 7)}) {
    auto r = vault_->put_secret("github-pat", SecretValue(bad));
    ASSERT_FALSE(r) << "accepted a value with a control byte";
    EXPECT_EQ(error_code(r.error()), code(ErrorCode::kInvalidArgument));
    EXPECT_NE(r.error().message.find("github-pat"), std::string::npos) << r.error().message;
  }
  auto list = vault_->list_secrets();
  ASSERT_TRUE(list);
  EXPECT_TRUE(list->empty());
  EXPECT_TRUE(vault_->put_secret("github-pat", SecretValue("ghp_a\tb c")));  // tab, space: fine
}

TEST_F(VaultTest, RefusesWrongMasterKeyAtOpen) {
  ASSERT_TRUE(vault_->put_secret("a", SecretValue("value")));
  vault_.reset();
  ASSERT_TRUE(write_file_atomic(state().master_key(), random_bytes(32), 0600));
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kBadMasterKey));
  EXPECT_NE(v.error().message.find("does not match"), std::string::npos) << v.error().message;
}

TEST_F(VaultTest, RefusesWorldReadableDatabase) {
  vault_.reset();
  ::chmod(state().vault_db().c_str(), 0644);
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("0644"), std::string::npos) << v.error().message;
}

TEST(VaultOpen, RefusesMissingDatabase) {
  TempState tmp;
  auto v = Vault::open(tmp.state());
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, code(ErrorCode::kNotInitialized));
  EXPECT_NE(v.error().message.find("cordon init"), std::string::npos);
}

TEST_F(VaultTest, RefusesNewerSchemaWithoutTouchingIt) {
  vault_.reset();
  raw_sql(state(), "PRAGMA user_version=99");
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kNewerSchema));
  EXPECT_NE(v.error().message.find("99"), std::string::npos);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(state().vault_db().c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 99);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_F(VaultTest, RefusesDatabaseWithoutSchema) {
  vault_.reset();
  raw_sql(state(), "PRAGMA user_version=0");
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kNotInitialized));
}

// Overwrites `len` bytes at `offset` of the database file (after the vault closed it, so that
// the WAL has been checkpointed into the main file).
void scribble(const std::string& path, long offset, size_t len) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekp(offset);
  std::string junk = random_bytes(len);
  f.write(junk.data(), std::streamsize(junk.size()));
}

TEST_F(VaultTest, RefusesOverwrittenHeader) {
  ASSERT_TRUE(vault_->put_secret("a", SecretValue("value")));
  vault_.reset();
  scribble(state().vault_db(), 0, 100);
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kCorrupt)) << v.error().message;
}

TEST_F(VaultTest, RefusesOverwrittenPages) {
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(
        vault_->put_secret("secret-" + std::to_string(i), SecretValue(std::string(200, 'x'))));
    TokenIssue t;
    t.credential = "github";
    ASSERT_TRUE(vault_->issue_token(t));
  }
  vault_.reset();
  struct stat st;
  ASSERT_EQ(::stat(state().vault_db().c_str(), &st), 0);
  ASSERT_GT(st.st_size, 4 * 4096);
  // Pages 2.. hold the b-trees; garbage there must be caught at open by quick_check.
  scribble(state().vault_db(), 4096 + 8, 3 * 4096);
  auto v = Vault::open(state());
  ASSERT_FALSE(v);
  EXPECT_EQ(error_code(v.error()), code(ErrorCode::kCorrupt)) << v.error().message;
  EXPECT_NE(v.error().message.find("vault"), std::string::npos);
}

TEST_F(VaultTest, SecretsRoundTripAndRotateWithHistory) {
  auto v1 = vault_->put_secret("github-pat", SecretValue("ghp_first"));
  ASSERT_TRUE(v1) << v1.error().message;
  EXPECT_EQ(*v1, 1);
  EXPECT_EQ((*vault_->secret("github-pat"))->view(), "ghp_first");
  auto v2 = vault_->put_secret("github-pat", SecretValue("ghp_second"));
  ASSERT_TRUE(v2);
  EXPECT_EQ(*v2, 2);
  EXPECT_EQ((*vault_->secret("github-pat"))->view(), "ghp_second");
  EXPECT_EQ(vault_->secret_version("github-pat", 1)->view(), "ghp_first");
  auto list = vault_->list_secrets();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "github-pat");
  EXPECT_EQ((*list)[0].version, 2);
  EXPECT_EQ((*list)[0].fingerprint.rfind("hmac:", 0), 0u);
  EXPECT_EQ((*list)[0].fingerprint.size(), 5u + 16u);

  // The values survive a reopen.
  vault_ = reopen();
  EXPECT_EQ((*vault_->secret("github-pat"))->view(), "ghp_second");
}

TEST_F(VaultTest, PlaintextNeverReachesTheDisk) {
  const std::string value = "sk-live-PLAINTEXT-MARKER-1234567890";
  ASSERT_TRUE(vault_->put_secret("k", SecretValue(value)));
  ASSERT_TRUE(vault_->put_secret("k", SecretValue(value + "-v2")));
  std::string bytes = testing::database_bytes(state());
  EXPECT_NE(bytes.find("key_check"), std::string::npos);  // the scan does see the data
  EXPECT_EQ(bytes.find("PLAINTEXT-MARKER"), std::string::npos);
}

TEST_F(VaultTest, FingerprintsAreKeyedAndStable) {
  ASSERT_TRUE(vault_->put_secret("a", SecretValue("same")));
  ASSERT_TRUE(vault_->put_secret("b", SecretValue("same")));
  ASSERT_TRUE(vault_->put_secret("c", SecretValue("other")));
  auto list = *vault_->list_secrets();
  EXPECT_EQ(list[0].fingerprint, list[1].fingerprint);
  EXPECT_NE(list[0].fingerprint, list[2].fingerprint);
  // Not a plain hash of the value: another vault (another master key) gives another one.
  TempState other;
  ASSERT_TRUE(Vault::initialize(other.state()));
  auto v = std::move(*Vault::open(other.state()));
  ASSERT_TRUE(v->put_secret("a", SecretValue("same")));
  EXPECT_NE((*v->list_secrets())[0].fingerprint, list[0].fingerprint);
}

TEST_F(VaultTest, RefusesEmptyOversizedAndBadlyNamedSecrets) {
  auto empty = vault_->put_secret("a", SecretValue(""));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, code(ErrorCode::kInvalidArgument));
  EXPECT_FALSE(vault_->put_secret("a", SecretValue(std::string(64 * 1024 + 1, 'x'))));
  for (const char* bad : {"", "-lead", "has space", "semi;colon", "new\nline"})
    EXPECT_FALSE(vault_->put_secret(bad, SecretValue("v"))) << bad;
  EXPECT_FALSE(vault_->put_secret(std::string(129, 'a'), SecretValue("v")));
  EXPECT_TRUE(vault_->put_secret(std::string(128, 'a'), SecretValue("v")));
}

TEST_F(VaultTest, RemoveDeletesAllVersions) {
  ASSERT_TRUE(vault_->put_secret("gone", SecretValue("v1")));
  ASSERT_TRUE(vault_->put_secret("gone", SecretValue("v2")));
  ASSERT_TRUE(vault_->secret("gone"));
  ASSERT_TRUE(vault_->remove_secret("gone"));
  auto r = vault_->secret("gone");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, code(ErrorCode::kNotFound));
  EXPECT_FALSE(vault_->secret_version("gone", 1));
  auto again = vault_->remove_secret("gone");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, code(ErrorCode::kNotFound));
  EXPECT_TRUE(vault_->list_secrets()->empty());
}

TEST_F(VaultTest, TamperedCiphertextNonceOrBindingFailsToDecrypt) {
  ASSERT_TRUE(vault_->put_secret("a", SecretValue("value-a")));
  ASSERT_TRUE(vault_->put_secret("b", SecretValue("value-b")));
  ASSERT_TRUE(vault_->put_secret("b", SecretValue("value-b2")));

  auto expect_decrypt_error = [&](const std::string& name, const std::string& context) {
    auto fresh = reopen();  // no cache
    auto r = fresh->secret(name);
    ASSERT_FALSE(r) << context;
    EXPECT_EQ(r.error().code, code(ErrorCode::kDecrypt)) << context << ": " << r.error().message;
  };

  // A flipped ciphertext bit.
  raw_sql(state(),
          "UPDATE secret_versions SET ciphertext = "
          "CAST(substr(ciphertext, 1, 2) || (CASE WHEN substr(ciphertext, 3, 1) = x'ff' "
          "THEN x'00' ELSE x'ff' END) || substr(ciphertext, 4) AS BLOB) "
          "WHERE name = 'a'");
  expect_decrypt_error("a", "ciphertext");
  ASSERT_TRUE(vault_->put_secret("a", SecretValue("value-a")));  // version 2, clean

  // A changed nonce.
  raw_sql(state(),
          "UPDATE secret_versions SET nonce = zeroblob(12) WHERE name = 'a' AND version = 2");
  expect_decrypt_error("a", "nonce");

  // b's ciphertext moved into a's row (same version number): the binding to the name fails.
  raw_sql(state(),
          "UPDATE secret_versions SET (nonce, ciphertext) = (SELECT nonce, ciphertext FROM "
          "secret_versions WHERE name = 'b' AND version = 2) WHERE name = 'a' AND version = 2");
  expect_decrypt_error("a", "moved row");

  // b's version 1 relabelled as the current version: the binding to the version fails.
  raw_sql(state(),
          "UPDATE secret_versions SET (nonce, ciphertext) = (SELECT nonce, ciphertext FROM "
          "secret_versions WHERE name = 'b' AND version = 1) WHERE name = 'b' AND version = 2");
  expect_decrypt_error("b", "version swap");

  // A truncated ciphertext.
  raw_sql(state(), "UPDATE secret_versions SET ciphertext = x'00' WHERE name = 'b'");
  expect_decrypt_error("b", "truncated");
}

TEST_F(VaultTest, SecretCacheFollowsChangesFromAnotherConnection) {
  ASSERT_TRUE(vault_->put_secret("s", SecretValue("one")));
  EXPECT_EQ((*vault_->secret("s"))->view(), "one");
  auto other = reopen();
  ASSERT_TRUE(other->put_secret("s", SecretValue("two")));
  EXPECT_EQ((*vault_->secret("s"))->view(), "two");
  ASSERT_TRUE(other->remove_secret("s"));
  EXPECT_FALSE(vault_->secret("s"));
}

TEST(SecretValueType, TakeWipesTheSourceAndMovesOwnership) {
  std::string s = "top-secret";
  SecretValue v = SecretValue::take(s);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(v.view(), "top-secret");
  SecretValue w = std::move(v);
  EXPECT_TRUE(v.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(w.view(), "top-secret");
  SecretValue c = w.clone();
  EXPECT_EQ(c.view(), w.view());
  EXPECT_NE(c.view().data(), w.view().data());
}

TEST(KeyRing, AssociatedDataIsUnambiguous) {
  EXPECT_NE(detail::associated_data("a|1", 2), detail::associated_data("a", 12));
  EXPECT_NE(detail::associated_data("ab", 1), detail::associated_data("a", 1));
  auto ring = detail::KeyRing::derive(std::string(32, '\x01'));
  ASSERT_TRUE(ring);
  auto sealed = ring->seal("n", 1, "plain");
  ASSERT_TRUE(sealed);
  EXPECT_EQ(sealed->nonce.size(), 12u);
  EXPECT_EQ(sealed->ciphertext.size(), 5u + 16u);
  auto again = ring->seal("n", 1, "plain");
  EXPECT_NE(sealed->nonce, again->nonce);  // fresh nonce each time
  EXPECT_EQ(ring->open("n", 1, sealed->nonce, sealed->ciphertext)->view(), "plain");
  EXPECT_FALSE(ring->open("n", 2, sealed->nonce, sealed->ciphertext));
  EXPECT_FALSE(detail::KeyRing::derive(std::string(16, 'x')));
}

}  // namespace
}  // namespace cordon::vault
