#include "common/authorization.h"

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

constexpr RoleMask kChief = RoleBit(Role::kChief);
constexpr RoleMask kWorker = RoleBit(Role::kWorker);
constexpr RoleMask kPs = RoleBit(Role::kPs);
constexpr RoleMask kEvaluator = RoleBit(Role::kEvaluator);

// Who calls what, from the clients' code: wire/ps_client.cc (workers,
// the evaluator, the chief's final evaluation and export),
// chief/grpc_ps_fleet.cc (the chief's control of the ps),
// ps_server/replicator.cc and step_broadcaster.cc (ps to ps),
// wire/chief_client.cc (workers and the evaluator to the chief),
// chief/cluster_tasks.cc (the chief to every task), wire/ring_client.cc
// and worker/ring_allreduce.cc (the ring).
const std::vector<RpcRule>& Table() {
  static const std::vector<RpcRule>* table = new std::vector<RpcRule>{
      {Rpc::kPsPull, "pscluster.ParameterServer/Pull", kWorker | kEvaluator | kChief,
       "worker_index", "weights for a step, an evaluation, the chief's final evaluation"},
      {Rpc::kPsPush, "pscluster.ParameterServer/Push", kWorker, "worker_index",
       "a worker's gradient"},
      {Rpc::kPsPullRows, "pscluster.ParameterServer/PullRows", kWorker | kEvaluator | kChief, "",
       "a sparse table's rows"},
      {Rpc::kPsPushPull, "pscluster.ParameterServer/PushPull", kWorker, "worker_index",
       "a worker's gradient and the next weights"},
      {Rpc::kPsGetStats, "pscluster.ParameterServer/GetStats", kWorker | kEvaluator | kChief | kPs,
       "", "counters, and the data plane's port"},
      {Rpc::kControlInit, "pscluster.PsControl/Init", kChief, "", "the shards' first values"},
      {Rpc::kControlSetWorkers, "pscluster.PsControl/SetWorkers", kChief, "",
       "which workers a sync step waits for"},
      {Rpc::kControlSnapshot, "pscluster.PsControl/Snapshot", kChief, "", "checkpoints"},
      {Rpc::kControlRestore, "pscluster.PsControl/Restore", kChief | kPs, "",
       "a checkpoint restored (chief); a new backup seeded by its primary (ps)"},
      {Rpc::kControlCommitStep, "pscluster.PsControl/CommitStep", kChief | kPs, "",
       "ps 0's sync step decisions (ps); a decision sent again after a fail-over (chief)"},
      {Rpc::kControlReplicate, "pscluster.PsControl/Replicate", kPs, "",
       "a primary's updates to its backups"},
      {Rpc::kControlPromote, "pscluster.PsControl/Promote", kChief, "", "a backup made primary"},
      {Rpc::kControlSetBackups, "pscluster.PsControl/SetBackups", kChief, "",
       "a primary's backups"},
      {Rpc::kControlGetDecision, "pscluster.PsControl/GetDecision", kChief, "",
       "the last step decision, after a fail-over"},
      {Rpc::kControlSetFollowers, "pscluster.PsControl/SetFollowers", kChief, "",
       "which ps follow ps 0's decisions"},
      {Rpc::kControlDemote, "pscluster.PsControl/Demote", kChief, "", "a stale primary fenced off"},
      {Rpc::kCoordinatorGetPlan, "pscluster.Coordinator/GetPlan", kWorker | kEvaluator,
       "task_type, task_index", "the run's plan"},
      {Rpc::kCoordinatorReportProgress, "pscluster.Coordinator/ReportProgress", kWorker,
       "worker_index", "a worker's progress"},
      {Rpc::kCoordinatorReportEval, "pscluster.Coordinator/ReportEval", kEvaluator, "",
       "an evaluation, the run's final line among them"},
      {Rpc::kCoordinatorGetWork, "pscluster.Coordinator/GetWork", kWorker, "worker_index",
       "the next chunk; the chunks done"},
      {Rpc::kCoordinatorHeartbeat, "pscluster.Coordinator/Heartbeat", kWorker, "worker_index",
       "a worker is alive"},
      {Rpc::kCoordinatorRingWork, "pscluster.Coordinator/RingWork", kWorker, "worker_index",
       "the ring's next step"},
      {Rpc::kCoordinatorGetReplica, "pscluster.Coordinator/GetReplica", kWorker, "",
       "the state a ring starts from"},
      {Rpc::kCoordinatorGetPlacement, "pscluster.Coordinator/GetPlacement", kWorker | kEvaluator,
       "", "which ps serves each shard now"},
      {Rpc::kTaskShutdown, "pscluster.TaskControl/Shutdown", kChief, "", "the run's end"},
      {Rpc::kTaskEvaluate, "pscluster.TaskControl/Evaluate", kChief, "",
       "an evaluation the chief asks for"},
      {Rpc::kRingSend, "pscluster.Ring/Send", kWorker, "", "a ring all-reduce's chunk"},
      {Rpc::kRingAbort, "pscluster.Ring/Abort", kWorker | kChief, "", "a ring ended early"},
      {Rpc::kRingGetReplica, "pscluster.Ring/GetReplica", kWorker | kChief | kEvaluator, "",
       "a worker's replica: a new ring's state, checkpoints, evaluations"},
  };
  return *table;
}

}  // namespace

const std::vector<RpcRule>& AuthorizationTable() { return Table(); }

const RpcRule& RuleOf(Rpc rpc) { return Table()[static_cast<size_t>(rpc)]; }

std::string AuthorizationTableMarkdown() {
  std::string out =
      "| method | chief | worker | ps | evaluator | only as itself | what for |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const RpcRule& r : Table()) {
    absl::StrAppend(&out, "| `", r.method, "` |");
    for (Role role : {Role::kChief, Role::kWorker, Role::kPs, Role::kEvaluator}) {
      absl::StrAppend(&out, Allows(r, role) ? " yes |" : " |");
    }
    absl::StrAppend(&out, " ", *r.as_itself ? absl::StrCat("`", r.as_itself, "`") : "", " | ",
                    r.why, " |\n");
  }
  return out;
}

}  // namespace pscluster
