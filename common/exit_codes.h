// The exit codes of every daemon (README "Exit codes"). Deployments restart
// a task on 1 only: the others say that starting it again changes nothing
// (deploy/docker/entrypoint.sh turns them into a quick, final exit).
#ifndef PSCLUSTER_COMMON_EXIT_CODES_H_
#define PSCLUSTER_COMMON_EXIT_CODES_H_

namespace pscluster {

// Done: the run ended well, or the chief ended it and stopped this task.
inline constexpr int kExitOk = 0;
// An error that a restart may cure (a peer gone, a crash-like failure).
inline constexpr int kExitError = 1;
// Bad flags or TF_CONFIG, or a model the device cannot run
// (common/bad_input.h): fix the command line.
inline constexpr int kExitBadInput = 2;
// The run failed: the chief gave it up (a ps that did not come back, a task
// that never answered, ...) and stopped every task with this code.
inline constexpr int kExitRunFailed = 3;
// The data is missing or unreadable (--data_dir).
inline constexpr int kExitBadData = 4;
// Stopped by SIGINT or SIGTERM before the end of the run (128 + SIGINT).
inline constexpr int kExitInterrupted = 130;

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_EXIT_CODES_H_
