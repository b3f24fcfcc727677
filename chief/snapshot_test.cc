#include "chief/snapshot.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string Floats(int64_t n, float first) {
  std::string out(n * sizeof(float), '\0');
  for (int64_t k = 0; k < n; ++k) {
    const float v = first + static_cast<float>(k);
    std::memcpy(&out[k * sizeof(float)], &v, sizeof v);
  }
  return out;
}

class SnapshotTest : public ::testing::Test {
 protected:
  SnapshotTest() : spec_(*ModelByName("mlp")) {
    PlacementOptions opt;
    opt.min_shard_bytes = 4096;  // several shards on each ps
    placement_ = PlaceVariables(spec_, 2, opt);
  }

  // A two-ps snapshot with Adam's slots, every value distinct.
  Snapshot TwoPs() const {
    Snapshot snap;
    snap.step = 41;
    snap.done_chunks = "0-9,12-13";
    snap.chunks_per_epoch = 469;
    snap.generation = 3;
    snap.run_started_unix_ms = 1700000000123;
    for (int i = 0; i < 2; ++i) {
      ShardState s;
      s.set_layout_fingerprint(placement_.fingerprint);
      s.set_version(41 + i);
      s.set_generation(3);
      s.set_optimizer_iterations(40 + i);
      const int64_t n = placement_.floats_of_ps[i];
      s.set_values(Floats(n, 1000.0f * i));
      for (const char* name : {"m", "v"}) {
        SlotValues* slot = s.add_slots();
        slot->set_name(name);
        slot->set_values(Floats(n, name[0] + 10.0f * i));
      }
      snap.ps.push_back(std::move(s));
    }
    return snap;
  }

  ModelSpec spec_;
  Placement placement_;
};

void ExpectSame(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.done_chunks, b.done_chunks);
  EXPECT_EQ(a.chunks_per_epoch, b.chunks_per_epoch);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.run_started_unix_ms, b.run_started_unix_ms);
  ASSERT_EQ(a.ps.size(), b.ps.size());
  for (size_t i = 0; i < a.ps.size(); ++i) {
    EXPECT_EQ(a.ps[i].SerializeAsString(), b.ps[i].SerializeAsString()) << "ps:" << i;
  }
}

TEST_F(SnapshotTest, RoundTripsInMemory) {
  ASSERT_GT(placement_.floats_of_ps[1], 0);
  const Snapshot snap = TwoPs();
  const Checkpoint c = ToCheckpoint(snap, spec_, SYNC);
  EXPECT_EQ(c.step, 41);
  EXPECT_EQ(c.metadata.at("model"), "mlp");
  EXPECT_EQ(c.metadata.at("mode"), "sync");
  EXPECT_EQ(c.metadata.at("num_ps"), "2");
  EXPECT_EQ(c.metadata.at("ps1/version"), "42");
  EXPECT_EQ(c.tensors.size(), 6u);  // values, m, v for each ps
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(snap, *back);
}

TEST_F(SnapshotTest, RoundTripsThroughACheckpointFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string dir = absl::StrCat(tmp, "/snapshot_round_trip");
  const Snapshot snap = TwoPs();
  ASSERT_TRUE(WriteCheckpoint(dir, ToCheckpoint(snap, spec_, ASYNC), 1).ok());
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata.at("mode"), "async");
  absl::StatusOr<Snapshot> back = FromCheckpoint(*c, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(snap, *back);
}

// Every layout fingerprint reads back, whatever its top bit (a uint64).
TEST_F(SnapshotTest, RoundTripsForEveryModelAndPsCount) {
  for (const std::string& model : KnownModels()) {
    const ModelSpec spec = *ModelByName(model);
    for (int num_ps = 1; num_ps <= 4; ++num_ps) {
      const Placement placement = PlaceVariables(spec, num_ps, PlacementOptions());
      Snapshot snap;
      snap.step = 7;
      snap.done_chunks = "0-3";
      snap.chunks_per_epoch = 10;
      for (int i = 0; i < num_ps; ++i) {
        ShardState s;
        s.set_layout_fingerprint(placement.fingerprint);
        s.set_values(Floats(placement.floats_of_ps[i], 0.5f));
        snap.ps.push_back(std::move(s));
      }
      absl::StatusOr<Snapshot> back = FromCheckpoint(ToCheckpoint(snap, spec, SYNC), placement);
      ASSERT_TRUE(back.ok()) << model << " on " << num_ps << " ps, layout " << placement.fingerprint
                             << ": " << back.status();
      ExpectSame(snap, *back);
    }
  }
}

TEST_F(SnapshotTest, TakesTheGenerationAndLayoutOfTheCheckpoint) {
  Snapshot snap = TwoPs();
  snap.ps[0].set_generation(0);  // ShardState's own generation is not stored
  absl::StatusOr<Snapshot> back = FromCheckpoint(ToCheckpoint(snap, spec_, SYNC), placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ps[0].generation(), 3);
  EXPECT_EQ(back->ps[0].layout_fingerprint(), placement_.fingerprint);
}

TEST_F(SnapshotTest, ACheckpointOfAnotherPsCountIsRefused) {
  const Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  const Placement three = PlaceVariables(spec_, 3, PlacementOptions());
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, three);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(back.status().message()),
            "the checkpoint of step 41 holds 2 ps; the cluster has 3");
}

TEST_F(SnapshotTest, ReshardingToOnePsAndBackKeepsEveryValueAndSlot) {
  Snapshot snap = TwoPs();
  snap.ps[1].set_version(41);  // a consistent cut: every ps at the step
  snap.ps[1].set_optimizer_iterations(40);
  const Placement one = PlaceVariables(spec_, 1, PlacementOptions());
  absl::StatusOr<Snapshot> whole = ReshardSnapshot(snap, placement_, one);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->ps.size(), 1u);
  EXPECT_EQ(whole->ps[0].version(), 41);
  EXPECT_EQ(whole->ps[0].optimizer_iterations(), 40);
  EXPECT_EQ(whole->ps[0].layout_fingerprint(), one.fingerprint);
  EXPECT_EQ(whole->done_chunks, snap.done_chunks);
  ASSERT_EQ(whole->ps[0].slots_size(), 2);
  // One ps holds the flat model in its own order: each shard of the two-ps
  // layout sits at its offset.
  for (int i = 0; i < 2; ++i) {
    int64_t at = 0;
    for (int k : placement_.shards_of_ps[i]) {
      const Shard& sh = placement_.shards[k];
      EXPECT_EQ(std::memcmp(whole->ps[0].values().data() + sh.offset * 4,
                            snap.ps[i].values().data() + at * 4, sh.size * 4),
                0)
          << sh.variable;
      EXPECT_EQ(std::memcmp(whole->ps[0].slots(1).values().data() + sh.offset * 4,
                            snap.ps[i].slots(1).values().data() + at * 4, sh.size * 4),
                0)
          << sh.variable;
      at += sh.size;
    }
  }
  absl::StatusOr<Snapshot> back = ReshardSnapshot(*whole, one, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(back->ps[i].values(), snap.ps[i].values()) << i;
    EXPECT_EQ(back->ps[i].slots(0).values(), snap.ps[i].slots(0).values()) << i;
    EXPECT_EQ(back->ps[i].slots(1).name(), "v");
    EXPECT_EQ(back->ps[i].layout_fingerprint(), placement_.fingerprint);
  }
}

TEST_F(SnapshotTest, ACheckpointOfAnotherPsCountIsReadResharded) {
  // Written by two ps (min_shard_bytes 4096), read by a one-ps run (the
  // ring's layout) and by a three-ps run: the same values.
  const Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  const Placement one = PlaceVariables(spec_, 1, PlacementOptions());
  absl::StatusOr<Snapshot> ring = FromCheckpointFor(c, spec_, 4096, one);
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_EQ(ring->ps.size(), 1u);
  PlacementOptions popt;
  popt.min_shard_bytes = 4096;
  const Placement three = PlaceVariables(spec_, 3, popt);
  absl::StatusOr<Snapshot> ps3 =
      FromCheckpointFor(ToCheckpoint(*ring, spec_, SYNC), spec_, 4096, three);
  ASSERT_TRUE(ps3.ok()) << ps3.status();
  absl::StatusOr<Snapshot> again = ReshardSnapshot(*ps3, three, one);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ps[0].values(), ring->ps[0].values());
  EXPECT_EQ(again->ps[0].slots(0).values(), ring->ps[0].slots(0).values());
  // The same ps count goes the plain way, with its errors.
  EXPECT_TRUE(FromCheckpointFor(c, spec_, 4096, placement_).ok());
  EXPECT_EQ(FromCheckpointFor(c, spec_, 65536, PlaceVariables(spec_, 2, PlacementOptions()))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Slots that differ between the ps cannot be put together.
  Snapshot odd = TwoPs();
  odd.ps[1].mutable_slots(1)->set_name("w");
  EXPECT_EQ(ReshardSnapshot(odd, placement_, one).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SnapshotTest, ACheckpointOfAnotherLayoutIsRefused) {
  const Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  const Placement coarse = PlaceVariables(spec_, 2, PlacementOptions());  // 64 KiB pieces
  ASSERT_NE(coarse.fingerprint, placement_.fingerprint);
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, coarse);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(back.status().message()), HasSubstr("another variable layout"));
}

TEST_F(SnapshotTest, EveryMissingKeyIsNamed) {
  const Checkpoint full = ToCheckpoint(TwoPs(), spec_, SYNC);
  for (const char* key : {"num_ps", "generation", "chunks_per_epoch", "done_chunks", "ps0/version",
                          "ps1/optimizer_iterations", "ps1/layout"}) {
    Checkpoint c = full;
    ASSERT_EQ(c.metadata.erase(key), 1u) << key;
    absl::StatusOr<Snapshot> back = FromCheckpoint(c, placement_);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << key;
    EXPECT_EQ(std::string(back.status().message()),
              absl::StrCat("checkpoint of step 41 lacks ", key));
  }
}

TEST_F(SnapshotTest, AnOlderCheckpointWithoutTheRunStartIsRead) {
  Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  c.metadata.erase("run_started_unix_ms");
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->run_started_unix_ms, 0);
}

TEST_F(SnapshotTest, ANumberThatIsNotOneIsNamed) {
  Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  c.metadata["ps1/version"] = "4x";
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, placement_);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(back.status().message()), "checkpoint ps1/version '4x' is not a number");
}

TEST_F(SnapshotTest, MissingOrShortValuesAreDataLoss) {
  const Checkpoint full = ToCheckpoint(TwoPs(), spec_, SYNC);
  Checkpoint missing = full;
  missing.tensors.erase(missing.tensors.begin() + 3);  // ps1/values
  ASSERT_EQ(full.tensors[3].name, "ps1/values");
  absl::StatusOr<Snapshot> back = FromCheckpoint(missing, placement_);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(back.status().message()),
            absl::StrCat("the checkpoint of step 41 holds 0 values for ps:1; the placement "
                         "gives it ",
                         placement_.floats_of_ps[1]));

  Checkpoint shorter = full;
  shorter.tensors[0].values.pop_back();
  back = FromCheckpoint(shorter, placement_);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(back.status().message()),
            absl::StrCat("the checkpoint of step 41 holds ", placement_.floats_of_ps[0] - 1,
                         " values for ps:0; the placement gives it ", placement_.floats_of_ps[0]));
}

}  // namespace
}  // namespace pscluster
