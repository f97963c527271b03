// Limits of the local CA. All are hard limits unless marked soft; the soft ones are defaults
// that LeafCacheOptions / AuthorityOptions may override within the hard bounds.
#pragma once

#include <chrono>
#include <cstddef>

namespace cordon::ca {

// A leaf is valid for at most this long from issuance (hard): a leaked leaf is only useful
// briefly, and the gateway re-mints long before it runs out.
inline constexpr std::chrono::hours kMaxLeafValidityHours{7 * 24};
// Default leaf lifetime (soft).
inline constexpr std::chrono::hours kDefaultLeafValidityHours{7 * 24};
// notBefore is set this far in the past so that a sandbox whose clock runs slightly behind
// still accepts a freshly minted leaf.
inline constexpr std::chrono::minutes kLeafBackdateMinutes{60};
// The root is long-lived: it is baked into templates, and replacing it means rebuilding them.
inline constexpr std::chrono::hours kRootValidityHours{10 * 365 * 24};

// DNS limits (RFC 1035 §2.3.4): 253 bytes of text, 63 per label.
inline constexpr size_t kMaxNameBytes = 253;
inline constexpr size_t kMaxLabelBytes = 63;

// LeafCertCache defaults (soft).
inline constexpr size_t kDefaultCacheEntries = 4096;
// A cached leaf whose expiry is closer than this is minted again.
inline constexpr std::chrono::hours kDefaultRenewMarginHours{24};
// Serial number size: 128 random bits with the top bit cleared (positive, DER fits 16 bytes).
inline constexpr size_t kSerialBytes = 16;

}  // namespace cordon::ca
