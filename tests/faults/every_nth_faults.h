// EveryNthFaults: the faults of a PsClient under test (wire/ps_client.h
// PushFaults) at fixed intervals: every `lose_reply_every`-th push (0:
// never) has its first answer thrown away as if lost on the way back, so
// it is sent again; every `duplicate_every`-th push is sent twice. A push
// that is both loses its reply. Test-only. Not thread-safe (a PsClient
// asks from one thread).
#ifndef PSCLUSTER_TESTS_FAULTS_EVERY_NTH_FAULTS_H_
#define PSCLUSTER_TESTS_FAULTS_EVERY_NTH_FAULTS_H_

#include <cstdint>

#include "wire/ps_client.h"

namespace pscluster {
namespace testing {

class EveryNthFaults final : public PushFaults {
 public:
  EveryNthFaults(int lose_reply_every, int duplicate_every)
      : lose_reply_every_(lose_reply_every), duplicate_every_(duplicate_every) {}

  Fault ForPush(int64_t push) override {
    if (lose_reply_every_ > 0 && push % lose_reply_every_ == 0) return Fault::kLoseReply;
    if (duplicate_every_ > 0 && push % duplicate_every_ == 0) return Fault::kDuplicate;
    return Fault::kNone;
  }

 private:
  const int lose_reply_every_;
  const int duplicate_every_;
};

}  // namespace testing
}  // namespace pscluster

#endif  // PSCLUSTER_TESTS_FAULTS_EVERY_NTH_FAULTS_H_
