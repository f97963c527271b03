#include "vault/detail/keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <memory>

#include "common/crypto.h"
#include "common/encoding.h"

namespace cordon::vault::detail {
namespace {

constexpr std::string_view kSalt = "cordon vault master key v1";
constexpr std::string_view kKeyCheckConstant = "cordon vault key check v1";

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};

const unsigned char* u8(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

Result<SecretValue> hkdf(std::string_view master, std::string_view info) {
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  unsigned char out[32];
  size_t out_len = sizeof out;
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), u8(kSalt), int(kSalt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), u8(master), int(master.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), u8(info), int(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), out, &out_len) <= 0 || out_len != sizeof out) {
    return fail("HKDF key derivation failed (" + std::string(info) + ")");
  }
  SecretValue key(std::string_view(reinterpret_cast<char*>(out), out_len));
  OPENSSL_cleanse(out, sizeof out);
  return key;
}

}  // namespace

std::string associated_data(std::string_view name, int64_t version) {
  // Length-prefixed so that no (name, version) pair can be written as another.
  std::string aad = "cordon secret v1|";
  aad += std::to_string(name.size());
  aad += '|';
  aad += name;
  aad += '|';
  aad += std::to_string(version);
  return aad;
}

Result<KeyRing> KeyRing::derive(std::string_view master) {
  if (master.size() != kMasterKeyBytes)
    return fail("master key must be " + std::to_string(kMasterKeyBytes) + " bytes, not " +
                    std::to_string(master.size()),
                code(ErrorCode::kBadMasterKey));
  KeyRing ring;
  auto enc = hkdf(master, "cordon vault v1 secret encryption");
  auto fp = hkdf(master, "cordon vault v1 fingerprint");
  auto check = hkdf(master, "cordon vault v1 key check");
  if (!enc) return fail(enc.error());
  if (!fp) return fail(fp.error());
  if (!check) return fail(check.error());
  ring.enc_key_ = std::move(*enc);
  ring.fp_key_ = std::move(*fp);
  ring.check_key_ = std::move(*check);
  return ring;
}

std::string KeyRing::key_check_value() const {
  return hex_encode(hmac_sha256(check_key_.view(), kKeyCheckConstant));
}

std::string KeyRing::fingerprint(std::string_view value) const {
  return "hmac:" + hex_encode(hmac_sha256(fp_key_.view(), value).substr(0, 8));
}

Result<KeyRing::Sealed> KeyRing::seal(std::string_view name, int64_t version,
                                      std::string_view plaintext) const {
  Sealed out;
  out.nonce = random_bytes(kNonceBytes);
  std::string aad = associated_data(name, version);
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  out.ciphertext.resize(plaintext.size() + kTagBytes);
  auto* ct = reinterpret_cast<unsigned char*>(out.ciphertext.data());
  int len = 0, fin = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, int(kNonceBytes), nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, u8(enc_key_.view()), u8(out.nonce)) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, u8(aad), int(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), ct, &len, u8(plaintext), int(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), ct + len, &fin) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, int(kTagBytes), ct + plaintext.size()) !=
          1) {
    return fail("AES-256-GCM encryption failed for secret '" + std::string(name) + "'");
  }
  return out;
}

Result<SecretValue> KeyRing::open(std::string_view name, int64_t version, std::string_view nonce,
                                  std::string_view ciphertext) const {
  std::string where = "secret '" + std::string(name) + "' version " + std::to_string(version);
  if (nonce.size() != kNonceBytes || ciphertext.size() < kTagBytes)
    return fail("decryption of " + where + " failed: malformed nonce or ciphertext",
                code(ErrorCode::kDecrypt));
  size_t pt_len = ciphertext.size() - kTagBytes;
  std::string aad = associated_data(name, version);
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  // Decrypt straight into the wiped-on-release buffer; on failure it is wiped and dropped.
  std::string buf(pt_len, '\0');
  auto* pt = reinterpret_cast<unsigned char*>(buf.data());
  std::string tag(ciphertext.substr(pt_len));
  int len = 0, fin = 0;
  bool ok =
      ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, int(kNonceBytes), nullptr) == 1 &&
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, u8(enc_key_.view()), u8(nonce)) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, u8(aad), int(aad.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), pt, &len, u8(ciphertext), int(pt_len)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, int(kTagBytes), tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), pt + len, &fin) == 1;
  if (!ok) {
    OPENSSL_cleanse(buf.data(), buf.size());
    return fail("decryption of " + where +
                    " failed: authentication error (ciphertext, nonce or binding tampered)",
                code(ErrorCode::kDecrypt));
  }
  return SecretValue::take(buf);
}

std::string fast_sha256(std::string_view data) {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char out[32];
  unsigned int len = 0;
  if (!md || !ctx || EVP_DigestInit_ex2(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) {
    return sha256(data);  // the slow path computes the same digest
  }
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace cordon::vault::detail
