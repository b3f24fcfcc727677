// worker: trains on its shard of the data under the chief's plan
// (worker/worker_main.h). `worker --help` lists its flags.
#include "worker/worker_main.h"

int main(int argc, char** argv) { return pscluster::WorkerMain(argc, argv); }
