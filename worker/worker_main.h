// The worker daemon's main: pulls weights from the parameter servers,
// computes gradients on its shard of the training data and pushes them
// back, under the plan the chief hands out (multi_worker_mirrored: holds
// the whole model and sums the gradients with the other workers in a
// ring); stays up after training until the chief ends the run.
//
// Shared by the shipped binary (worker/main.cc), which injects nothing, and
// the tests' fault-injecting worker (tests/faults/faulty_worker_main.cc),
// whose own flags say what goes wrong.
#ifndef PSCLUSTER_WORKER_WORKER_MAIN_H_
#define PSCLUSTER_WORKER_WORKER_MAIN_H_

#include <functional>

#include "worker/trainer_options.h"

namespace pscluster {

// Parses the flags (exit 2 on a bad one), trains, and returns the exit
// code (common/exit_codes.h). `faults`, when set, is called once the flags
// are parsed and says which faults to inject.
int WorkerMain(int argc, char** argv, const std::function<WorkerFaults()>& faults = {});

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_WORKER_MAIN_H_
