#include "common/state_dir.h"

#include <cstdlib>

namespace cordon {

StateDir StateDir::resolve(const std::string& flag_value) {
  if (!flag_value.empty()) return StateDir{flag_value};
  if (const char* env = std::getenv("CORDON_HOME"); env && *env) return StateDir{env};
  return StateDir{"/var/lib/cordon"};
}

}  // namespace cordon
