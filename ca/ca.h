// ca/: cordon's local certificate authority.
//
// Owns the root key pair and self-signed root certificate (ECDSA P-256) in the state
// directory, and the one leaf key pair that every minted leaf certificate shares, so that
// minting a leaf for an SNI costs one signature. Leaves are short-lived (<= 7 days), carry the
// exact name (DNS name or IP address) as SAN and CN, a random positive 128-bit serial,
// extendedKeyUsage serverAuth and AKI/SKI.
//
// Trust: the files in the state directory are trusted only after checks (key files must be
// 0600, key and cert must match, the root must be a CA). Names to mint come from the
// sandbox's ClientHello, i.e. from an untrusted client: they are validated strictly and
// refused, never repaired; wildcards are never minted.
//
// Thread safety: an Authority is immutable after create()/load(); mint() and every accessor
// may be called from any number of threads at once.
//
// Ownership: certificates and keys are handed out as std::shared_ptr with OpenSSL deleters
// (X509_free, EVP_PKEY_free). A caller that needs a raw pointer for OpenSSL APIs which take
// their own reference (SSL_use_certificate, SSL_use_PrivateKey, SSL_add1_chain_cert...) may pass
// ptr.get() while it holds the shared_ptr; for APIs that take ownership (SSL_add0_chain_cert)
// call X509_up_ref(ptr.get()) first.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/state_dir.h"
#include "common/time_format.h"

namespace cordon::ca {

// Error codes (Error::code) that callers may branch on.
enum class CaError : int {
  kMissing = 1,      // no CA in the state directory (run `cordon ca init`)
  kExists = 2,       // create() without force over an existing CA
  kBadName = 3,      // the name to mint is not a valid leaf name
  kRateLimited = 4,  // LeafCertCache: the mints-per-second limit was reached
};

using X509Ptr = std::shared_ptr<X509>;
using PKeyPtr = std::shared_ptr<EVP_PKEY>;

// A validated name to mint for: lower-cased DNS name, or an IP address in canonical text form.
struct LeafName {
  std::string text;  // "api.github.com", "192.0.2.1", "2001:db8::1"
  bool is_ip = false;
};

// Validates and normalizes a name for a leaf: a host name of common/host_name.h (the grammar
// the policy and the SNI parser use: labels of a-z, 0-9, '-', '_', no '-' at a label's edge,
// no all-digit last label), lower-cased, without a trailing dot; wildcards are refused. IPv4
// dotted quads and IPv6 addresses (optionally in brackets) are accepted as IP names.
Result<LeafName> validate_leaf_name(std::string_view name);

// The root certificate of the CA in `state` as PEM, read without touching the keys (so that a user
// who may read the certificate but not the keys can export it). Checks that it parses and is a CA.
Result<std::string> read_root_pem(const StateDir& state);

// PEM text of a certificate.
Result<std::string> to_pem(X509* cert);

struct MintedLeaf {
  X509Ptr cert;
  SystemTime not_before;
  SystemTime not_after;
};

struct AuthorityOptions {
  // Lifetime of minted leaves, counted from now; clamped to kMaxLeafValidityHours.
  std::chrono::seconds leaf_validity = std::chrono::hours(7 * 24);
};

class Authority {
 public:
  // Creates the root key, root certificate and shared leaf key in state.ca_dir() (0700),
  // key files 0600. Refuses if any of them exists, unless force is set.
  static Result<std::shared_ptr<const Authority>> create(const StateDir& state, bool force,
                                                         AuthorityOptions options = {});
  // Loads and checks them: key files must not be readable by group/others, the root key must
  // match the root certificate, the root must be a CA certificate, the leaf key must be EC.
  static Result<std::shared_ptr<const Authority>> load(const StateDir& state,
                                                       AuthorityOptions options = {});

  // Mints a leaf for `name` (validated by validate_leaf_name) valid from now - 1 h to
  // now + leaf_validity. `now` is a parameter so that tests control time.
  Result<MintedLeaf> mint(std::string_view name, SystemTime now) const;
  Result<MintedLeaf> mint(std::string_view name) const {
    return mint(name, std::chrono::system_clock::now());
  }

  // The root certificate as PEM, for templates and `cordon ca export`.
  const std::string& root_pem() const { return root_pem_; }
  // The root certificate (the chain the gateway sends after the leaf) and the shared leaf key.
  const X509Ptr& root_cert() const { return root_cert_; }
  const PKeyPtr& leaf_key() const { return leaf_key_; }

  // Use create() or load(); public only for std::make_shared.
  Authority(X509Ptr root_cert, PKeyPtr root_key, PKeyPtr leaf_key, std::string root_pem,
            std::string root_key_id, std::string leaf_key_id, AuthorityOptions options);

 private:
  X509Ptr root_cert_;
  PKeyPtr root_key_;
  PKeyPtr leaf_key_;
  std::string root_pem_;
  std::string root_key_id_;  // the root's SKI, the leaves' AKI
  std::string leaf_key_id_;  // SKI of the shared leaf key
  // The leaf public key as a legacy (EC_KEY-backed) EVP_PKEY, public part only. OpenSSL 3.0
  // encodes a provider key through its encoder framework, which costs several times the
  // signature on every X509_set_pubkey; a legacy key takes the direct encoder.
  PKeyPtr leaf_public_;
  AuthorityOptions options_;
};

}  // namespace cordon::ca
