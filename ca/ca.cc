// Root creation/loading and leaf minting. See ca.h for the design note.

// EVP_PKEY_get1_EC_KEY & co. are deprecated in OpenSSL 3 but are the only way to a key that
// X509_set_pubkey encodes without the (slow, in 3.0) encoder framework; see leaf_public_.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "ca/ca.h"

#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>

#include "ca/detail/ossl.h"
#include "ca/limits.h"
#include "common/crypto.h"
#include "common/encoding.h"
#include "common/file_io.h"

namespace cordon::ca {
namespace detail {

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace detail

namespace {

using namespace detail;

constexpr int kCodeMissing = int(CaError::kMissing);

X509Ptr share(UniqueX509 p) {
  return X509Ptr(p.release(), X509Free{});
}
PKeyPtr share(UniquePKey p) {
  return PKeyPtr(p.release(), PKeyFree{});
}

Result<UniquePKey> generate_p256() {
  UniquePKey key(EVP_EC_gen("P-256"));
  if (!key) return fail("generating a P-256 key: " + openssl_error());
  return key;
}

Result<std::string> bio_text(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  if (len < 0 || !data) return fail("reading a memory BIO");
  return std::string(data, size_t(len));
}

Result<std::string> key_to_pem(EVP_PKEY* key) {
  UniqueBio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return fail("encoding a private key: " + openssl_error());
  return bio_text(bio.get());
}

Result<std::string> cert_to_pem(X509* cert) {
  UniqueBio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1)
    return fail("encoding a certificate: " + openssl_error());
  return bio_text(bio.get());
}

Result<UniquePKey> key_from_pem(const std::string& pem, const std::string& path) {
  UniqueBio bio(BIO_new_mem_buf(pem.data(), int(pem.size())));
  UniquePKey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return fail(path + " does not hold a PEM private key: " + openssl_error());
  if (EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_EC)
    return fail(path + " is not an EC key (cordon's CA uses ECDSA P-256)");
  return key;
}

Result<UniqueX509> cert_from_pem(const std::string& pem, const std::string& path) {
  UniqueBio bio(BIO_new_mem_buf(pem.data(), int(pem.size())));
  UniqueX509 cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return fail(path + " does not hold a PEM certificate: " + openssl_error());
  return cert;
}

// RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey BIT STRING.
Result<std::string> key_id(EVP_PKEY* key) {
  X509_PUBKEY* pk = nullptr;
  if (X509_PUBKEY_set(&pk, key) != 1) return fail("encoding a public key: " + openssl_error());
  const unsigned char* bits = nullptr;
  int len = 0;
  X509_PUBKEY_get0_param(nullptr, &bits, &len, nullptr, pk);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  bool ok = bits && EVP_Digest(bits, size_t(len), md, &md_len, EVP_sha1(), nullptr) == 1;
  X509_PUBKEY_free(pk);
  if (!ok) return fail("hashing a public key: " + openssl_error());
  return std::string(reinterpret_cast<char*>(md), md_len);
}

Status set_random_serial(X509* cert) {
  UniqueBn bn;
  do {
    std::string bytes = random_bytes(kSerialBytes);
    bytes[0] = char(uint8_t(bytes[0]) & 0x7f);  // positive, so DER needs no leading zero byte
    bn.reset(BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()),
                       nullptr));
    if (!bn) return fail("serial number: " + openssl_error());
  } while (BN_is_zero(bn.get()));
  if (!BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)))
    return fail("serial number: " + openssl_error());
  return {};
}

Status set_validity(X509* cert, SystemTime from, SystemTime to) {
  time_t a = std::chrono::system_clock::to_time_t(from);
  time_t b = std::chrono::system_clock::to_time_t(to);
  if (!ASN1_TIME_set(X509_getm_notBefore(cert), a) || !ASN1_TIME_set(X509_getm_notAfter(cert), b))
    return fail("setting validity: " + openssl_error());
  return {};
}

Status add_octet_ext(X509* cert, int nid, const std::string& bytes) {
  ASN1_OCTET_STRING* os = ASN1_OCTET_STRING_new();
  bool ok = os &&
            ASN1_OCTET_STRING_set(os, reinterpret_cast<const unsigned char*>(bytes.data()),
                                  int(bytes.size())) == 1 &&
            X509_add1_ext_i2d(cert, nid, os, 0, X509V3_ADD_REPLACE) == 1;
  ASN1_OCTET_STRING_free(os);
  if (!ok) return fail("adding extension " + std::string(OBJ_nid2sn(nid)) + ": " + openssl_error());
  return {};
}

Status add_aki(X509* cert, const std::string& issuer_key_id) {
  AUTHORITY_KEYID* aki = AUTHORITY_KEYID_new();
  bool ok = aki && (aki->keyid = ASN1_OCTET_STRING_new()) != nullptr &&
            ASN1_OCTET_STRING_set(aki->keyid,
                                  reinterpret_cast<const unsigned char*>(issuer_key_id.data()),
                                  int(issuer_key_id.size())) == 1 &&
            X509_add1_ext_i2d(cert, NID_authority_key_identifier, aki, 0, X509V3_ADD_REPLACE) == 1;
  AUTHORITY_KEYID_free(aki);
  if (!ok) return fail("adding authorityKeyIdentifier: " + openssl_error());
  return {};
}

Status add_basic_constraints(X509* cert, bool is_ca) {
  BASIC_CONSTRAINTS* bc = BASIC_CONSTRAINTS_new();
  bool ok = bc != nullptr;
  if (ok) {
    bc->ca = is_ca ? 0xff : 0;
    ok = X509_add1_ext_i2d(cert, NID_basic_constraints, bc, 1, X509V3_ADD_REPLACE) == 1;
  }
  BASIC_CONSTRAINTS_free(bc);
  if (!ok) return fail("adding basicConstraints: " + openssl_error());
  return {};
}

Status add_key_usage(X509* cert, std::initializer_list<int> bits) {
  ASN1_BIT_STRING* ku = ASN1_BIT_STRING_new();
  bool ok = ku != nullptr;
  for (int bit : bits) ok = ok && ASN1_BIT_STRING_set_bit(ku, bit, 1) == 1;
  ok = ok && X509_add1_ext_i2d(cert, NID_key_usage, ku, 1, X509V3_ADD_REPLACE) == 1;
  ASN1_BIT_STRING_free(ku);
  if (!ok) return fail("adding keyUsage: " + openssl_error());
  return {};
}

Status add_server_auth_eku(X509* cert) {
  EXTENDED_KEY_USAGE* eku = sk_ASN1_OBJECT_new_null();
  bool ok = eku && sk_ASN1_OBJECT_push(eku, OBJ_nid2obj(NID_server_auth)) > 0 &&
            X509_add1_ext_i2d(cert, NID_ext_key_usage, eku, 0, X509V3_ADD_REPLACE) == 1;
  // OBJ_nid2obj returns a static object; freeing the stack's elements is harmless for it.
  EXTENDED_KEY_USAGE_free(eku);
  if (!ok) return fail("adding extendedKeyUsage: " + openssl_error());
  return {};
}

Status add_san(X509* cert, const LeafName& name) {
  UniqueGenNames names(GENERAL_NAMES_new());
  GENERAL_NAME* gn = GENERAL_NAME_new();
  if (!names || !gn) {
    GENERAL_NAME_free(gn);
    return fail("subjectAltName: " + openssl_error());
  }
  bool ok = true;
  if (name.is_ip) {
    ASN1_OCTET_STRING* ip = a2i_IPADDRESS(name.text.c_str());
    ok = ip != nullptr;
    if (ok) GENERAL_NAME_set0_value(gn, GEN_IPADD, ip);
  } else {
    ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
    ok = dns && ASN1_STRING_set(dns, name.text.data(), int(name.text.size())) == 1;
    if (ok) {
      GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
    } else {
      ASN1_IA5STRING_free(dns);
    }
  }
  if (!ok || sk_GENERAL_NAME_push(names.get(), gn) <= 0) {
    GENERAL_NAME_free(gn);
    return fail("subjectAltName for " + name.text + ": " + openssl_error());
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_REPLACE) != 1)
    return fail("adding subjectAltName: " + openssl_error());
  return {};
}

Status set_name_entries(X509_NAME* n,
                        std::initializer_list<std::pair<const char*, std::string>> kv) {
  for (auto& [field, value] : kv) {
    if (X509_NAME_add_entry_by_txt(n, field, MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(value.data()),
                                   int(value.size()), -1, 0) != 1)
      return fail(std::string("setting ") + field + "=" + value + ": " + openssl_error());
  }
  return {};
}

Result<UniqueX509> make_root(EVP_PKEY* key, const std::string& key_identifier) {
  UniqueX509 cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1)
    return fail("new certificate: " + openssl_error());
  if (auto s = set_random_serial(cert.get()); !s) return fail(s.error());
  // A per-install suffix tells two cordon roots apart in a trust store.
  std::string cn = "cordon local root CA " + hex_encode(random_bytes(4));
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (auto s = set_name_entries(subject, {{"O", "cordon"}, {"CN", cn}}); !s) return fail(s.error());
  if (X509_set_issuer_name(cert.get(), subject) != 1) return fail("issuer: " + openssl_error());
  auto now = std::chrono::system_clock::now();
  if (auto s = set_validity(cert.get(), now - kLeafBackdateMinutes, now + kRootValidityHours); !s)
    return fail(s.error());
  if (X509_set_pubkey(cert.get(), key) != 1) return fail("public key: " + openssl_error());
  if (auto s = add_basic_constraints(cert.get(), true); !s) return fail(s.error());
  if (auto s = add_key_usage(cert.get(), {5 /* keyCertSign */, 6 /* cRLSign */}); !s)
    return fail(s.error());
  if (auto s = add_octet_ext(cert.get(), NID_subject_key_identifier, key_identifier); !s)
    return fail(s.error());
  if (X509_sign(cert.get(), key, EVP_sha256()) <= 0)
    return fail("signing root: " + openssl_error());
  return cert;
}

// A public-only, EC_KEY-backed copy of `key` (see leaf_public_ in ca.h); null on failure.
EVP_PKEY* legacy_public_copy(EVP_PKEY* key) {
  EC_KEY* src = EVP_PKEY_get1_EC_KEY(key);
  if (!src) return nullptr;
  EC_KEY* pub = EC_KEY_new_by_curve_name(EC_GROUP_get_curve_name(EC_KEY_get0_group(src)));
  EVP_PKEY* out = EVP_PKEY_new();
  bool ok = pub && out && EC_KEY_set_public_key(pub, EC_KEY_get0_public_key(src)) == 1 &&
            EVP_PKEY_assign_EC_KEY(out, pub) == 1;
  EC_KEY_free(src);
  if (!ok) {
    EC_KEY_free(pub);
    EVP_PKEY_free(out);
    ERR_clear_error();
    return nullptr;
  }
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

Result<std::string> to_pem(X509* cert) {
  return cert_to_pem(cert);
}

Result<std::string> read_root_pem(const StateDir& state) {
  if (!exists(state.ca_cert()))
    return fail(
        "no CA in " + state.ca_dir() + " (missing " + state.ca_cert() + "); run 'cordon ca init'",
        kCodeMissing);
  auto pem = read_file(state.ca_cert());
  if (!pem) return fail(pem.error());
  auto cert = cert_from_pem(*pem, state.ca_cert());
  if (!cert) return fail(cert.error());
  if (X509_check_ca(cert->get()) == 0)
    return fail(state.ca_cert() + " is not a CA certificate (basicConstraints CA:TRUE missing)");
  return cert_to_pem(cert->get());
}

Authority::Authority(X509Ptr root_cert, PKeyPtr root_key, PKeyPtr leaf_key, std::string root_pem,
                     std::string root_key_id, std::string leaf_key_id, AuthorityOptions options)
    : root_cert_(std::move(root_cert)),
      root_key_(std::move(root_key)),
      leaf_key_(std::move(leaf_key)),
      root_pem_(std::move(root_pem)),
      root_key_id_(std::move(root_key_id)),
      leaf_key_id_(std::move(leaf_key_id)),
      options_(options) {
  // Without the fast copy, minting still works, only slower.
  EVP_PKEY* pub = legacy_public_copy(leaf_key_.get());
  leaf_public_ = pub ? PKeyPtr(pub, PKeyFree{}) : leaf_key_;
  if (options_.leaf_validity > kMaxLeafValidityHours ||
      options_.leaf_validity <= std::chrono::seconds(0))
    options_.leaf_validity = kMaxLeafValidityHours;
}

Result<std::shared_ptr<const Authority>> Authority::create(const StateDir& state, bool force,
                                                           AuthorityOptions options) {
  for (const auto& path : {state.ca_key(), state.ca_cert(), state.leaf_key()}) {
    if (exists(path) && !force)
      return fail("a CA already exists (" + path +
                      "); replacing it breaks every template that trusts the old root, so it "
                      "needs --force",
                  int(CaError::kExists));
  }
  if (auto s = ensure_directory(state.ca_dir(), 0700); !s) return fail(s.error());

  auto root_key = generate_p256();
  if (!root_key) return fail(root_key.error());
  auto leaf_key = generate_p256();
  if (!leaf_key) return fail(leaf_key.error());
  auto root_id = key_id(root_key->get());
  if (!root_id) return fail(root_id.error());
  auto leaf_id = key_id(leaf_key->get());
  if (!leaf_id) return fail(leaf_id.error());
  auto root = make_root(root_key->get(), *root_id);
  if (!root) return fail(root.error());

  auto root_key_pem = key_to_pem(root_key->get());
  if (!root_key_pem) return fail(root_key_pem.error());
  auto leaf_key_pem = key_to_pem(leaf_key->get());
  if (!leaf_key_pem) return fail(leaf_key_pem.error());
  auto root_pem = cert_to_pem(root->get());
  if (!root_pem) return fail(root_pem.error());

  // The certificate goes last: load() finds either the complete set or a missing root.
  if (auto s = write_file_atomic(state.leaf_key(), *leaf_key_pem, 0600); !s) return fail(s.error());
  if (auto s = write_file_atomic(state.ca_key(), *root_key_pem, 0600); !s) return fail(s.error());
  if (auto s = write_file_atomic(state.ca_cert(), *root_pem, 0644); !s) return fail(s.error());

  return std::shared_ptr<const Authority>(std::make_shared<Authority>(
      share(std::move(*root)), share(std::move(*root_key)), share(std::move(*leaf_key)),
      std::move(*root_pem), std::move(*root_id), std::move(*leaf_id), options));
}

Result<std::shared_ptr<const Authority>> Authority::load(const StateDir& state,
                                                         AuthorityOptions options) {
  if (!exists(state.ca_cert()) || !exists(state.ca_key()) || !exists(state.leaf_key()))
    return fail("no CA in " + state.ca_dir() + " (missing " +
                    (!exists(state.ca_cert())  ? state.ca_cert()
                     : !exists(state.ca_key()) ? state.ca_key()
                                               : state.leaf_key()) +
                    "); run 'cordon ca init'",
                kCodeMissing);
  auto cert_pem = read_file(state.ca_cert());
  if (!cert_pem) return fail(cert_pem.error());
  auto root_key_pem = read_private_file(state.ca_key());
  if (!root_key_pem) return fail(root_key_pem.error());
  auto leaf_key_pem = read_private_file(state.leaf_key());
  if (!leaf_key_pem) return fail(leaf_key_pem.error());

  auto root = cert_from_pem(*cert_pem, state.ca_cert());
  if (!root) return fail(root.error());
  auto root_key = key_from_pem(*root_key_pem, state.ca_key());
  if (!root_key) return fail(root_key.error());
  auto leaf_key = key_from_pem(*leaf_key_pem, state.leaf_key());
  if (!leaf_key) return fail(leaf_key.error());

  if (X509_check_private_key(root->get(), root_key->get()) != 1) {
    ERR_clear_error();
    return fail(state.ca_key() + " does not match the certificate " + state.ca_cert());
  }
  if (X509_check_ca(root->get()) == 0)
    return fail(state.ca_cert() + " is not a CA certificate (basicConstraints CA:TRUE missing)");

  std::string root_id;
  if (const ASN1_OCTET_STRING* ski = X509_get0_subject_key_id(root->get())) {
    root_id.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(ski)),
                   size_t(ASN1_STRING_length(ski)));
  } else {
    auto id = key_id(root_key->get());
    if (!id) return fail(id.error());
    root_id = std::move(*id);
  }
  auto leaf_id = key_id(leaf_key->get());
  if (!leaf_id) return fail(leaf_id.error());
  // Re-encode rather than echo the file, so that root_pem() is exactly one certificate.
  auto root_pem = cert_to_pem(root->get());
  if (!root_pem) return fail(root_pem.error());

  return std::shared_ptr<const Authority>(std::make_shared<Authority>(
      share(std::move(*root)), share(std::move(*root_key)), share(std::move(*leaf_key)),
      std::move(*root_pem), std::move(root_id), std::move(*leaf_id), options));
}

Result<MintedLeaf> Authority::mint(std::string_view raw_name, SystemTime now) const {
  auto name = validate_leaf_name(raw_name);
  if (!name) return fail(name.error().message, int(CaError::kBadName));

  UniqueX509 cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1)
    return fail("new certificate: " + openssl_error());
  if (auto s = set_random_serial(cert.get()); !s) return fail(s.error());

  X509_NAME* subject = X509_get_subject_name(cert.get());
  // CN is limited to 64 characters (RFC 5280 ub-common-name); the SAN carries the name anyway.
  if (name->text.size() <= 64) {
    if (auto s = set_name_entries(subject, {{"CN", name->text}}); !s) return fail(s.error());
  } else {
    if (auto s = set_name_entries(subject, {{"O", "cordon"}}); !s) return fail(s.error());
  }
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(root_cert_.get())) != 1)
    return fail("issuer: " + openssl_error());

  MintedLeaf out;
  // Whole seconds: X.509 times have no fraction, and callers compare against these values.
  now = std::chrono::time_point_cast<std::chrono::seconds>(now);
  out.not_before = now - kLeafBackdateMinutes;
  out.not_after = now + options_.leaf_validity;
  if (auto s = set_validity(cert.get(), out.not_before, out.not_after); !s) return fail(s.error());
  if (X509_set_pubkey(cert.get(), leaf_public_.get()) != 1)
    return fail("public key: " + openssl_error());
  if (auto s = add_basic_constraints(cert.get(), false); !s) return fail(s.error());
  if (auto s = add_key_usage(cert.get(), {0 /* digitalSignature */}); !s) return fail(s.error());
  if (auto s = add_server_auth_eku(cert.get()); !s) return fail(s.error());
  if (auto s = add_san(cert.get(), *name); !s) return fail(s.error());
  if (auto s = add_octet_ext(cert.get(), NID_subject_key_identifier, leaf_key_id_); !s)
    return fail(s.error());
  if (auto s = add_aki(cert.get(), root_key_id_); !s) return fail(s.error());
  if (X509_sign(cert.get(), root_key_.get(), EVP_sha256()) <= 0)
    return fail("signing leaf for " + name->text + ": " + openssl_error());
  out.cert = share(std::move(cert));
  return out;
}

}  // namespace cordon::ca
