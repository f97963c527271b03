// Parsing of the rules file's `gateway:` section (policy/gateway_settings.h), called by the
// rules parser with its error sink so that findings carry file:line like every other.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

#include "policy/gateway_settings.h"

namespace cordon::policy::detail {

using LintError = std::function<void(const YAML::Mark&, std::string)>;

// `key` is the `gateway` key node (its mark is used when the value has none), `value` the
// section. Every unknown key, wrong type and out-of-range value is reported through `error`;
// valid values are stored in `out`.
void parse_gateway_section(const YAML::Node& key, const YAML::Node& value, GatewaySettings* out,
                           const LintError& error);

}  // namespace cordon::policy::detail
