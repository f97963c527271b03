// The one state directory (design.md §5) and the fixed places of what lives in it. Every
// component takes its paths from here so that the layout is written down once.
#pragma once

#include <string>

namespace cordon {

struct StateDir {
  std::string root;

  // --state, else $CORDON_HOME, else /var/lib/cordon.
  static StateDir resolve(const std::string& flag_value);

  std::string ca_dir() const { return root + "/ca"; }
  std::string ca_key() const { return root + "/ca/root.key"; }  // 0600
  std::string ca_cert() const { return root + "/ca/root.pem"; }
  std::string leaf_key() const { return root + "/ca/leaf.key"; }   // 0600
  std::string master_key() const { return root + "/master.key"; }  // 0600, 32 bytes
  std::string vault_db() const { return root + "/vault.db"; }      // 0600
  std::string audit_dir() const { return root + "/audit"; }
  std::string audit_log() const { return root + "/audit/audit.jsonl"; }
  std::string admin_socket() const { return root + "/admin.sock"; }  // 0600, root only
  // `cordon serve`'s steering control (attach/detach sandbox interfaces), 0600, root only.
  std::string steering_socket() const { return root + "/steering.sock"; }
  // The interfaces serve's steering is attached to, re-attached when serve starts again.
  std::string steering_state() const { return root + "/steering.json"; }  // 0600
};

}  // namespace cordon
