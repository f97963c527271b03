// Plain data shared by the request stages: one HTTP header field as the parser delivered it.
// Names and values are raw (not trimmed, not lower-cased) so that the checks see exactly what
// the sandbox sent; the order of the list is the order on the wire.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/encoding.h"

namespace cordon::gateway {

struct Header {
  std::string name;
  std::string value;
  bool operator==(const Header&) const = default;
};

using HeaderList = std::vector<Header>;

using ::cordon::ascii_iequals;  // common/encoding.h
std::string ascii_lower(std::string_view s);

}  // namespace cordon::gateway
