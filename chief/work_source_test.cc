#include "chief/work_source.h"

#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Serves only what every strategy serves.
class HeartbeatsOnly final : public WorkSource {
 public:
  absl::Status Heartbeat(const HeartbeatRequest&, absl::Time) override { return absl::OkStatus(); }
};

TEST(WorkSourceTest, ACallOfTheOtherStrategyNamesTheStrategyThatServesIt) {
  HeartbeatsOnly source;
  absl::Status work = source.GetWork(WorkRequest(), absl::Now()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(work));
  EXPECT_EQ(work.message(),
            "GetWork is for --strategy=parameter_server; this run's chief plans the other "
            "strategy");
  absl::Status ring = source.RingWork(RingWorkRequest(), absl::Now()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(ring));
  EXPECT_EQ(ring.message(),
            "RingWork is for --strategy=multi_worker_mirrored; this run's chief plans the other "
            "strategy");
  absl::Status replica = source.GetReplica(ReplicaRequest()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(replica));
  EXPECT_EQ(replica.message(),
            "GetReplica is for --strategy=multi_worker_mirrored; this run's chief plans the "
            "other strategy");
}

}  // namespace
}  // namespace pscluster
