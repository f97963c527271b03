// Keys derived from the master key, and the AEAD that protects secrets at rest.
//
// master key (32 random bytes, master.key)
//   ├─ HKDF-SHA256(info "cordon vault v1 secret encryption") → AES-256-GCM key
//   ├─ HKDF-SHA256(info "cordon vault v1 fingerprint")       → HMAC key for fingerprints
//   └─ HKDF-SHA256(info "cordon vault v1 key check")         → HMAC key for the key check value
// Distinct labels keep the uses independent: a fingerprint or the key check value reveals
// nothing about the encryption key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "vault/vault.h"

namespace cordon::vault::detail {

inline constexpr size_t kMasterKeyBytes = 32;
inline constexpr size_t kNonceBytes = 12;  // 96-bit GCM nonce, random per encryption
inline constexpr size_t kTagBytes = 16;

class KeyRing {
 public:
  // `master` must be kMasterKeyBytes long.
  static Result<KeyRing> derive(std::string_view master);

  // The value stored in the database at initialization and compared at open.
  std::string key_check_value() const;
  // "hmac:" + 16 hex chars of HMAC(fingerprint key, value).
  std::string fingerprint(std::string_view value) const;

  struct Sealed {
    std::string nonce;       // kNonceBytes
    std::string ciphertext;  // ciphertext || tag
  };
  // The associated data binds the ciphertext to (name, version): a row moved elsewhere fails.
  Result<Sealed> seal(std::string_view name, int64_t version, std::string_view plaintext) const;
  Result<SecretValue> open(std::string_view name, int64_t version, std::string_view nonce,
                           std::string_view ciphertext) const;

 private:
  SecretValue enc_key_;
  SecretValue fp_key_;
  SecretValue check_key_;
};

std::string associated_data(std::string_view name, int64_t version);

// SHA-256 with a digest implementation fetched once (OpenSSL 3 would otherwise look the
// algorithm up on every call, which dominates a token lookup).
std::string fast_sha256(std::string_view data);

}  // namespace cordon::vault::detail
