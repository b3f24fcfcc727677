#include "chief/snapshot.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/sparse_layout.h"
#include "update/store_state.h"

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

  // TwoPs() with three sparse tables on both ps, each row on its
  // RowOwner's ps: table 0 (3 floats a row, small and large ids), table 1
  // (2 floats a row, ids near 2^40), table 2 (4 floats a row, no rows yet).
  Snapshot TwoPsWithSparse() const {
    Snapshot snap = TwoPs();
    const int64_t floats_per_row[] = {3, 2, 4};
    std::vector<int64_t> ids[3];
    for (int64_t id = 0; id < 40; ++id) ids[0].push_back(id);
    ids[0].push_back(int64_t{1} << 62);
    for (int64_t k = 0; k < 25; ++k) ids[1].push_back((int64_t{1} << 40) + 7 * k);
    for (int i = 0; i < 2; ++i) {
      for (int t = 0; t < 3; ++t) {
        SparseTableState* table = snap.ps[i].add_sparse();
        table->set_table(t);
        table->set_floats_per_row(floats_per_row[t]);
        for (int64_t id : ids[t]) {
          if (RowOwner(t, id, 2) != i) continue;
          table->add_ids(id);
          table->add_last_update(40 - id % 5);
          table->mutable_rows()->append(
              Floats(floats_per_row[t], 0.5f * static_cast<float>(id % 1000) + 100.0f * t));
        }
      }
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

TEST_F(SnapshotTest, ACheckpointOfAnElasticPlacementSaysSoAndIsReadByEitherPlacement) {
  // Two of at most three ps (--min_ps): another cut and placement than the
  // fixed two-ps run's, with the same ps count.
  PlacementOptions popt;
  popt.min_shard_bytes = 4096;
  popt.max_ps = 3;
  const Placement elastic = PlaceVariables(spec_, 2, popt);
  ASSERT_NE(elastic.fingerprint, placement_.fingerprint);
  absl::StatusOr<Snapshot> snap = ReshardSnapshot(TwoPs(), placement_, elastic);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->placement_max_ps, 3);
  const Checkpoint c = ToCheckpoint(*snap, spec_, SYNC);
  EXPECT_EQ(c.metadata.at("placement_max_ps"), "3");
  EXPECT_EQ(ToCheckpoint(TwoPs(), spec_, SYNC).metadata.count("placement_max_ps"), 0u);
  // The elastic run reads it as written.
  absl::StatusOr<Snapshot> same = FromCheckpointFor(c, spec_, 4096, elastic);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->placement_max_ps, 3);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(same->ps[i].values(), snap->ps[i].values()) << i;
  // A fixed run of two ps reads it resharded: what TwoPs() held.
  const Snapshot two = TwoPs();
  absl::StatusOr<Snapshot> fixed = FromCheckpointFor(c, spec_, 4096, placement_);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->placement_max_ps, 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fixed->ps[i].values(), two.ps[i].values()) << i;
    EXPECT_EQ(fixed->ps[i].slots(1).values(), two.ps[i].slots(1).values()) << i;
    EXPECT_EQ(fixed->ps[i].layout_fingerprint(), placement_.fingerprint);
  }
  // And an elastic run reads a fixed run's checkpoint.
  absl::StatusOr<Snapshot> back =
      FromCheckpointFor(ToCheckpoint(two, spec_, SYNC), spec_, 4096, elastic);
  ASSERT_TRUE(back.ok()) << back.status();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(back->ps[i].values(), snap->ps[i].values()) << i;
  for (const char* bad : {"-1", "x", "70000"}) {
    Checkpoint odd = c;
    odd.metadata["placement_max_ps"] = bad;
    const absl::Status s = FromCheckpointFor(odd, spec_, 4096, placement_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("placement_max_ps \"", bad, "\""))) << bad;
  }
}

// A move's restore of ps i: what KeepInPlace leaves in the request, put
// together with what ps i holds (MergeKept, as the ps does), is the moved
// snapshot's state of ps i.
void ExpectKeptAndSentMakeTheMove(const Snapshot& held, const Placement& from,
                                  const Snapshot& moved, const Placement& to, int i,
                                  int64_t expected_sent_floats) {
  SCOPED_TRACE(absl::StrCat("ps ", i, " of ", to.num_ps));
  RestoreRequest req;
  *req.mutable_state() = moved.ps[i];
  const int64_t left_out = KeepInPlace(from, to, i, &req);
  const int64_t tensors = 1 + moved.ps[i].slots_size();
  EXPECT_EQ(left_out, tensors * 4 * (to.floats_of_ps[i] - expected_sent_floats));
  EXPECT_EQ(static_cast<int64_t>(req.state().values().size()), 4 * expected_sent_floats);
  if (i >= from.num_ps) {
    EXPECT_EQ(req.kept_size(), 0);
    return;
  }
  absl::StatusOr<StoreState> own = StoreStateFromProto(held.ps[i]);
  absl::StatusOr<StoreState> given = StoreStateFromProto(req.state());
  absl::StatusOr<StoreState> want = StoreStateFromProto(moved.ps[i]);
  ASSERT_TRUE(own.ok() && given.ok() && want.ok());
  ASSERT_TRUE(MergeKept(*own, req.kept(), to.floats_of_ps[i], &*given).ok());
  EXPECT_EQ(given->values, want->values);
  ASSERT_EQ(given->optimizer.slots.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(given->optimizer.slots[s].values, want->optimizer.slots[s].values) << s;
  }
}

TEST_F(SnapshotTest, AMoveSendsOnlyTheFloatsThatChangePsAndThePsPutsThemTogether) {
  PlacementOptions popt;
  popt.min_shard_bytes = 4096;
  popt.max_ps = 3;
  const Placement two = PlaceVariables(spec_, 2, popt);
  const Placement three = PlaceVariables(spec_, 3, popt);
  absl::StatusOr<Snapshot> on_two = ReshardSnapshot(TwoPs(), placement_, two);
  ASSERT_TRUE(on_two.ok()) << on_two.status();
  absl::StatusOr<Snapshot> on_three = ReshardSnapshot(*on_two, two, three);
  ASSERT_TRUE(on_three.ok()) << on_three.status();
  // Adding ps 2: ps 0 and 1 keep all they still hold, and are sent nothing.
  for (int i = 0; i < 2; ++i) ExpectKeptAndSentMakeTheMove(*on_two, two, *on_three, three, i, 0);
  ExpectKeptAndSentMakeTheMove(*on_two, two, *on_three, three, 2, three.floats_of_ps[2]);
  // Draining it: ps 0 and 1 are sent only what ps 2 held of theirs.
  absl::StatusOr<Snapshot> back = ReshardSnapshot(*on_three, three, two);
  ASSERT_TRUE(back.ok()) << back.status();
  int64_t from_two[2] = {0, 0};
  for (int i : three.shards_of_ps[2]) from_two[two.shards[i].ps] += three.shards[i].size;
  EXPECT_GT(from_two[0] + from_two[1], 0);
  for (int i = 0; i < 2; ++i) {
    ExpectKeptAndSentMakeTheMove(*on_three, three, *back, two, i, from_two[i]);
  }
}

TEST(MergeKeptTest, RefusesRangesThatDoNotFit) {
  StoreState own;
  own.values = {1, 2, 3, 4};
  auto range = [](int64_t from, int64_t to, int64_t size) {
    KeptRange r;
    r.set_from(from);
    r.set_to(to);
    r.set_size(size);
    return r;
  };
  google::protobuf::RepeatedPtrField<KeptRange> kept;
  *kept.Add() = range(2, 1, 2);  // own 3, 4 at 1..2 of 4
  StoreState given;
  given.values = {10, 20};
  ASSERT_TRUE(MergeKept(own, kept, 4, &given).ok());
  EXPECT_EQ(given.values, (std::vector<float>{10, 3, 4, 20}));
  for (const auto& [bad, n, sent, what] :
       std::vector<std::tuple<KeptRange, int64_t, int, std::string>>{
           {range(3, 1, 2), 4, 2, "past the 4 floats held"},
           {range(0, 3, 2), 4, 2, "of the layout"},
           {range(0, 1, 0), 4, 2, "out of order"},
           {range(2, 1, 2), 4, 3, "3 floats sent; the layout takes 2"},
           {range(2, 1, 2), 4, 1, "1 floats sent; the layout needs more"}}) {
    google::protobuf::RepeatedPtrField<KeptRange> k;
    *k.Add() = bad;
    StoreState g;
    g.values.assign(sent, 7.0f);
    const absl::Status s = MergeKept(own, k, n, &g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(s.message(), HasSubstr(what));
  }
  StoreState with_slot;
  with_slot.optimizer.slots.push_back({"m", {}});
  with_slot.values = {};
  google::protobuf::RepeatedPtrField<KeptRange> all;
  *all.Add() = range(0, 0, 4);
  EXPECT_THAT(MergeKept(own, all, 4, &with_slot).message(), HasSubstr("slot \"m\""));
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

TEST_F(SnapshotTest, ReshardingRefusesAParameterInNoShardOfTheSnapshot) {
  // A placement of `to` whose last shard reaches past every shard of the
  // snapshot's: named, not filled with zeros or read out of bounds.
  Placement to = PlaceVariables(spec_, 1, PlacementOptions());
  Shard& last = to.shards[to.shards_of_ps[0].back()];
  last.size += 1;
  to.floats_of_ps[0] += 1;
  absl::StatusOr<Snapshot> s = ReshardSnapshot(TwoPs(), placement_, to);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find(
                absl::StrCat("parameter ", last.offset + last.size - 1, " (", last.variable, ")")),
            std::string::npos)
      << s.status();
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

TEST_F(SnapshotTest, SparseRowsRoundTripThroughACheckpointFileBitForBit) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string dir = absl::StrCat(tmp, "/snapshot_sparse_round_trip");
  Snapshot snap = TwoPsWithSparse();
  // A NaN's payload and -0 travel as they are.
  const float odd[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f};
  std::memcpy(&(*snap.ps[1].mutable_sparse(0)->mutable_rows())[0], odd, sizeof odd);
  ASSERT_GT(snap.ps[0].sparse(1).ids_size(), 0);
  ASSERT_GT(snap.ps[1].sparse(1).ids_size(), 0);

  const Checkpoint written = ToCheckpoint(snap, spec_, SYNC);
  EXPECT_EQ(written.metadata.at("ps1/sparse_tables"), "3");
  EXPECT_EQ(written.metadata.at("ps1/sparse2/table"), "2");
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : written.tensors) by_name[t.name] = &t;
  const SparseTableState& table = snap.ps[0].sparse(0);
  ASSERT_EQ(by_name.count("ps0/sparse0/ids"), 1u);
  EXPECT_EQ(by_name["ps0/sparse0/ids"]->dtype, NamedTensor::Dtype::kI64);
  EXPECT_EQ(by_name["ps0/sparse0/ids"]->shape, std::vector<int64_t>{table.ids_size()});
  EXPECT_EQ(by_name["ps0/sparse0/rows"]->dtype, NamedTensor::Dtype::kF32);
  EXPECT_EQ(by_name["ps0/sparse0/rows"]->shape, (std::vector<int64_t>{table.ids_size(), 3}));
  EXPECT_EQ(by_name["ps0/sparse0/last_update"]->dtype, NamedTensor::Dtype::kI64);
  EXPECT_EQ(by_name["ps1/sparse2/rows"]->shape, (std::vector<int64_t>{0, 4}));

  ASSERT_TRUE(WriteCheckpoint(dir, written, 1).ok());
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Snapshot> back = FromCheckpoint(*c, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->ps[1].sparse_size(), 3);
  ExpectSame(snap, *back);  // every ShardState byte for byte, the rows included
}

// Which ps each row of each table is on, and its row and last update.
using RowsById = std::map<std::tuple<int, int64_t>, std::tuple<int, std::string, int64_t>>;

RowsById RowsOf(const Snapshot& snap) {
  RowsById out;
  for (size_t i = 0; i < snap.ps.size(); ++i) {
    for (const SparseTableState& t : snap.ps[i].sparse()) {
      const size_t row_bytes = t.floats_per_row() * sizeof(float);
      for (int k = 0; k < t.ids_size(); ++k) {
        out[{t.table(), t.ids(k)}] = {static_cast<int>(i),
                                      t.rows().substr(k * row_bytes, row_bytes), t.last_update(k)};
      }
    }
  }
  return out;
}

TEST_F(SnapshotTest, ReshardingSparseTablesPutsEveryRowOnItsOwnerAndBack) {
  const Snapshot snap = TwoPsWithSparse();
  PlacementOptions popt;
  popt.min_shard_bytes = 4096;
  const Placement three = PlaceVariables(spec_, 3, popt);
  absl::StatusOr<Snapshot> ps3 = ReshardSnapshot(snap, placement_, three);
  ASSERT_TRUE(ps3.ok()) << ps3.status();
  ASSERT_EQ(ps3->ps.size(), 3u);
  const RowsById before = RowsOf(snap);
  const RowsById after = RowsOf(*ps3);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [key, row] : after) {
    const auto& [table, id] = key;
    EXPECT_EQ(std::get<0>(row), RowOwner(table, id, 3)) << table << "/" << id;
    EXPECT_EQ(std::get<1>(row), std::get<1>(before.at(key))) << table << "/" << id;
    EXPECT_EQ(std::get<2>(row), std::get<2>(before.at(key))) << table << "/" << id;
  }
  const int64_t floats_per_row[] = {3, 2, 4};
  for (int j = 0; j < 3; ++j) {
    ASSERT_EQ(ps3->ps[j].sparse_size(), 3) << j;
    for (int t = 0; t < 3; ++t) {
      const SparseTableState& table = ps3->ps[j].sparse(t);
      EXPECT_EQ(table.table(), t);
      EXPECT_EQ(table.floats_per_row(), floats_per_row[t]);
      for (int k = 1; k < table.ids_size(); ++k) EXPECT_LT(table.ids(k - 1), table.ids(k));
    }
  }
  // Through a checkpoint of three ps read back by a two-ps run: the original.
  absl::StatusOr<Snapshot> back =
      FromCheckpointFor(ToCheckpoint(*ps3, spec_, SYNC), spec_, 4096, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(back->ps[i].sparse_size(), 3);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(back->ps[i].sparse(t).SerializeAsString(), snap.ps[i].sparse(t).SerializeAsString())
          << "ps" << i << " table " << t;
    }
  }
}

TEST_F(SnapshotTest, ReshardingRefusesARowOnTwoPsOrTwoWidths) {
  const Placement one = PlaceVariables(spec_, 1, PlacementOptions());
  Snapshot twice = TwoPsWithSparse();
  SparseTableState* t0 = twice.ps[1].mutable_sparse(0);
  const int64_t id = twice.ps[0].sparse(0).ids(0);
  t0->add_ids(id);  // held by ps0 too (ids need not stay increasing here)
  t0->add_last_update(1);
  t0->mutable_rows()->append(Floats(3, 0.0f));
  absl::StatusOr<Snapshot> s = ReshardSnapshot(twice, placement_, one);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr(absl::StrCat("row ", id, " of sparse table 0 is on ps0 and ps1")));

  Snapshot wide = TwoPsWithSparse();
  wide.ps[1].mutable_sparse(2)->set_floats_per_row(5);
  s = ReshardSnapshot(wide, placement_, one);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("ps1's sparse table 2 has 5 floats"));
}

TEST_F(SnapshotTest, ACheckpointWithoutSparseTablesReadsWithNone) {
  Checkpoint c = ToCheckpoint(TwoPs(), spec_, SYNC);
  EXPECT_EQ(c.tensors.size(), 6u);
  // As written before sparse tables: no count at all.
  ASSERT_EQ(c.metadata.erase("ps0/sparse_tables"), 1u);
  ASSERT_EQ(c.metadata.erase("ps1/sparse_tables"), 1u);
  absl::StatusOr<Snapshot> back = FromCheckpoint(c, placement_);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(TwoPs(), *back);
  EXPECT_EQ(back->ps[0].sparse_size(), 0);
}

TEST_F(SnapshotTest, AMissingOrMismatchedSparseTensorIsNamed) {
  const Checkpoint full = ToCheckpoint(TwoPsWithSparse(), spec_, SYNC);
  auto read_without = [&](const std::string& name) {
    Checkpoint c = full;
    for (auto it = c.tensors.begin(); it != c.tensors.end(); ++it) {
      if (it->name == name) {
        c.tensors.erase(it);
        break;
      }
    }
    return FromCheckpoint(c, placement_).status();
  };
  for (const char* name : {"ps0/sparse0/ids", "ps1/sparse2/rows", "ps1/sparse1/last_update"}) {
    const absl::Status s = read_without(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_EQ(std::string(s.message()), absl::StrCat("checkpoint of step 41 lacks ", name));
  }
  Checkpoint no_table = full;
  no_table.metadata.erase("ps1/sparse1/table");
  EXPECT_EQ(std::string(FromCheckpoint(no_table, placement_).status().message()),
            "checkpoint of step 41 lacks ps1/sparse1/table");

  Checkpoint short_rows = full;
  for (NamedTensor& t : short_rows.tensors) {
    if (t.name != "ps0/sparse1/rows") continue;
    t.shape[0] -= 1;
    t.values.resize(t.values.size() - 2);
  }
  absl::Status s = FromCheckpoint(short_rows, placement_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps0/sparse1/rows has shape ["));

  Checkpoint float_ids = full;
  for (NamedTensor& t : float_ids.tensors) {
    if (t.name != "ps0/sparse0/ids") continue;
    t.dtype = NamedTensor::Dtype::kF32;
    t.values.assign(t.ints.size(), 0.0f);
    t.ints.clear();
  }
  s = FromCheckpoint(float_ids, placement_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps0/sparse0/ids is F32 ["));

  Checkpoint unsorted = full;
  for (NamedTensor& t : unsorted.tensors) {
    if (t.name == "ps1/sparse0/ids") std::swap(t.ints[0], t.ints[1]);
  }
  s = FromCheckpoint(unsorted, placement_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps1/sparse0/ids are not increasing"));
}

}  // namespace
}  // namespace pscluster
