// Which role may call which method: the cluster's one authorization table.
//
// Every handler of our gRPC services names its method when it checks the
// call (CheckAuth(ctx, Rpc::kPsPush), common/security.h). With --authorize
// on, the caller's identity (its certificate's URI:pscluster://ROLE/INDEX,
// or its token in --auth_identities_file, common/identity.h) must have a
// role the method's rule allows; anything else gets PERMISSION_DENIED and
// changes nothing. docs/security.md prints this table
// (AuthorizationTableMarkdown; readme_test checks that it matches).
//
// Constant data: thread-safe.
#ifndef PSCLUSTER_COMMON_AUTHORIZATION_H_
#define PSCLUSTER_COMMON_AUTHORIZATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/identity.h"

namespace pscluster {

// Each method of the ParameterServer, PsControl, Coordinator, TaskControl
// and Ring services (proto/).
enum class Rpc : uint8_t {
  kPsPull,
  kPsPush,
  kPsPullRows,
  kPsPushPull,
  kPsGetStats,
  kControlInit,
  kControlSetWorkers,
  kControlSnapshot,
  kControlRestore,
  kControlCommitStep,
  kControlReplicate,
  kControlPromote,
  kControlSetBackups,
  kControlGetDecision,
  kControlSetFollowers,
  kControlDemote,
  kCoordinatorGetPlan,
  kCoordinatorReportProgress,
  kCoordinatorReportEval,
  kCoordinatorGetWork,
  kCoordinatorHeartbeat,
  kCoordinatorRingWork,
  kCoordinatorGetReplica,
  kCoordinatorGetPlacement,
  kTaskShutdown,
  kTaskEvaluate,
  kRingSend,
  kRingAbort,
  kRingGetReplica,
  kCount,
};

// A role set, one bit per Role.
using RoleMask = uint8_t;
constexpr RoleMask RoleBit(Role r) { return static_cast<RoleMask>(1u << static_cast<int>(r)); }

struct RpcRule {
  Rpc rpc;
  const char* method;  // "pscluster.ParameterServer/Push", as gRPC names it
  RoleMask roles;      // who may call it
  // Checked in the handler besides the role: the caller may act only as
  // itself ("worker_index"), or "" when the role is enough.
  const char* as_itself;
  const char* why;  // one line for the docs: who calls it, for what
};

// Every method once, in Rpc's order.
const std::vector<RpcRule>& AuthorizationTable();
const RpcRule& RuleOf(Rpc rpc);

inline bool Allows(const RpcRule& rule, Role role) { return (rule.roles & RoleBit(role)) != 0; }

// The table as docs/security.md prints it (a Markdown table, one row per
// method, a column per role).
std::string AuthorizationTableMarkdown();

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_AUTHORIZATION_H_
