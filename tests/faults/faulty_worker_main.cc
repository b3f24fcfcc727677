// faulty_worker: the worker daemon (worker/worker_main.h) with faults the
// tests ask for, through the worker's test seam (WorkerFaults): a
// straggler, lost replies, duplicated pushes. Built for the tests only; the
// shipped worker has none of these flags.
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/daemon.h"
#include "tests/faults/every_nth_faults.h"
#include "worker/worker_main.h"

ABSL_FLAG(int, straggle_ms, 0, "Sleep this long before every push (a slow worker)");
ABSL_FLAG(int, lose_reply_every, 0,
          "Every Nth push-pull's answer is thrown away as if lost on the way back, and the "
          "push is sent again (0: never)");
ABSL_FLAG(int, duplicate_every, 0, "Every Nth push is sent twice (0: never)");

int main(int argc, char** argv) {
  using namespace pscluster;
  std::unique_ptr<testing::EveryNthFaults> push;
  return WorkerMain(argc, argv, [&push] {
    for (const auto& [flag, name] : {std::pair{&FLAGS_straggle_ms, "straggle_ms"},
                                     std::pair{&FLAGS_lose_reply_every, "lose_reply_every"},
                                     std::pair{&FLAGS_duplicate_every, "duplicate_every"}}) {
      if (absl::GetFlag(*flag) < 0) {
        ExitWithUsageError(absl::StrCat("--", name, " must be >= 0, got ", absl::GetFlag(*flag)));
      }
    }
    push = std::make_unique<testing::EveryNthFaults>(absl::GetFlag(FLAGS_lose_reply_every),
                                                     absl::GetFlag(FLAGS_duplicate_every));
    WorkerFaults faults;
    faults.push = push.get();
    faults.straggle = absl::Milliseconds(absl::GetFlag(FLAGS_straggle_ms));
    return faults;
  });
}
