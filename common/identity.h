// Who a caller is: its task's role and index, from its TLS certificate or
// from its token, for authorization (common/authorization.h).
//
// A task's identity is written "worker/3" (the role, a slash, the index;
// "chief" alone is "chief/0"). In a certificate it is a subject alternative
// name of type URI: `URI:pscluster://worker/3`, beside the DNS and IP names
// the TLS hostname check reads. With tokens only, each task holds its own
// token (--auth_token_file) and every server the list of which identity each
// token is (--auth_identities_file): one line per task, "worker/3 <the
// token's SHA-256, 64 hex digits>", so a task that reads the list learns no
// other task's token. deploy/tls/make_test_ca.sh --tasks writes both.
//
// Plain values and pure functions: thread-safe.
#ifndef PSCLUSTER_COMMON_IDENTITY_H_
#define PSCLUSTER_COMMON_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

enum class Role : uint8_t { kChief = 0, kWorker = 1, kPs = 2, kEvaluator = 3 };
inline constexpr int kNumRoles = 4;

// "chief", "worker", "ps", "evaluator": TF_CONFIG's task types.
const char* RoleName(Role role);
std::optional<Role> RoleFromName(absl::string_view name);

struct TaskIdentity {
  Role role = Role::kWorker;
  int index = 0;

  // "worker/3".
  std::string ToString() const;
  bool operator==(const TaskIdentity& o) const { return role == o.role && index == o.index; }
  bool operator!=(const TaskIdentity& o) const { return !(*this == o); }
};

// The largest index an identity may name.
inline constexpr int kMaxTaskIndex = 1 << 20;

// "worker/3", or a role alone for index 0 ("chief"). InvalidArgument saying
// what is wrong otherwise (an unknown role, an index that is not a number
// in [0, kMaxTaskIndex], anything after it).
absl::StatusOr<TaskIdentity> ParseIdentity(absl::string_view text);

// The certificate URI naming `id`: "pscluster://worker/3".
std::string IdentityUri(const TaskIdentity& id);

// The identity in a certificate (PEM; the first certificate of a chain):
// its subject alternative names of type URI with the scheme "pscluster".
// NotFound when it has none; InvalidArgument when the PEM does not parse,
// a pscluster URI is malformed, or two name different tasks.
absl::StatusOr<TaskIdentity> IdentityFromCertificate(absl::string_view pem);

// The SHA-256 of `token` in lowercase hex: what --auth_identities_file lists.
std::string TokenDigest(absl::string_view token);

// --auth_identities_file's content: which identity each token is.
class TokenIdentities {
 public:
  // Parses "identity digest" lines; blank lines and lines starting with #
  // are skipped. A task may be listed with two tokens (while it rotates
  // them). InvalidArgument naming the line (1-based) and what is wrong: a
  // bad identity or digest, a digest listed twice, no entries at all.
  static absl::StatusOr<TokenIdentities> Parse(absl::string_view text);

  // The identity of `token`, or nullopt when it is not listed. Compares
  // the token's digest with every entry in constant time per entry.
  std::optional<TaskIdentity> Find(absl::string_view token) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    TaskIdentity id;
    std::string digest;  // 32 bytes, raw
  };
  std::vector<Entry> entries_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_IDENTITY_H_
