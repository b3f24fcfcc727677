// Replicated ps over real gRPC (docs/replication.md): a primary ps given a
// backup (SetBackups) seeds it and sends it every update before it answers
// a worker, so that whenever a worker holds an answer for version v the
// backup holds v too; at the end the two hold the same bits. A backup that
// dies no longer holds answers back, and one started in its place is
// seeded again. A promoted backup answers the pushes the primary applied as
// it did and fences off the old generation; a primary refuses a seed; a
// second backup, once the promoted one seeded it, refuses the old
// primary's records and seeds (primary terms).
// Updates go over the backup's tcp data plane where it has one (as
// ps_server's backup store does) and over gRPC where not, with the same
// results; the data plane's records must add up to its payload.
// Two or three ps in this process, the workers' pushes by gRPC stubs.
#include <atomic>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/rpc.h"
#include "common/task_server.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/data_plane_server.h"
#include "ps_server/ps_service.h"
#include "tests/local_cluster.h"
#include "update/parameter_store.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 99;
constexpr int kFloats = 5000;

struct Ps {
  ParameterStore store{1};
  std::unique_ptr<Metrics> metrics = *Metrics::Start("", "ps", MetricsRole::kPs);
  std::unique_ptr<PsService> service;
  std::unique_ptr<TaskServer> server;
  std::unique_ptr<DataPlaneServer> data_plane;  // null: updates come over gRPC
  int port = 0;
  std::unique_ptr<ParameterServer::Stub> stub;
  std::unique_ptr<PsControl::Stub> control;

  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

// A ps on `port` (0: a free one), with a tcp data plane when `data_plane`
// (as ps_server serves its backup store).
std::unique_ptr<Ps> StartPs(int port = 0, bool data_plane = false) {
  auto p = std::make_unique<Ps>();
  p->service = std::make_unique<PsService>(&p->store, p->metrics.get());
  if (port == 0) port = testing::FreePort();
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(port, p->service->grpc_services());
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  p->server = *std::move(server);
  p->port = port;
  if (data_plane) {
    absl::StatusOr<std::unique_ptr<DataPlaneServer>> dp =
        DataPlaneServer::Start(0, p->service.get(), nullptr, uint64_t{1} << 30);
    EXPECT_TRUE(dp.ok()) << dp.status();
    if (!dp.ok()) return nullptr;
    p->data_plane = *std::move(dp);
    p->service->shard().set_data_port(p->data_plane->port());
  }
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(p->address());
  p->stub = ParameterServer::NewStub(channel);
  p->control = PsControl::NewStub(channel);
  return p;
}

void StopPs(Ps* p) {
  p->store.Cancel();
  p->data_plane.reset();
  p->server->Stop(absl::ZeroDuration());
}

void Init(Ps* p, UpdateMode mode, int workers) {
  InitRequest req;
  req.set_layout_fingerprint(kLayout);
  ShardSpec* sh = req.add_shards();
  sh->set_variable("w");
  sh->set_size(kFloats);
  std::vector<float> values(kFloats);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (float& v : values) v = normal(rng);
  req.set_values(values.data(), values.size() * sizeof(float));
  req.mutable_optimizer()->set_name("adam");
  req.mutable_optimizer()->set_learning_rate(0.01f);
  req.mutable_optimizer()->set_beta1(0.9f);
  req.mutable_optimizer()->set_beta2(0.999f);
  req.mutable_optimizer()->set_epsilon(1e-7f);
  req.set_mode(mode);
  req.set_num_workers(workers);
  req.set_replicas_to_aggregate(workers);
  grpc::ClientContext ctx;
  InitResponse resp;
  grpc::Status s = p->control->Init(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

grpc::Status SetBackups(Ps* p, const std::vector<std::string>& addresses) {
  SetBackupsRequest req;
  req.set_layout_fingerprint(kLayout);
  for (const std::string& a : addresses) req.add_addresses(a);
  grpc::ClientContext ctx;
  SetBackupsResponse resp;
  return p->control->SetBackups(&ctx, req, &resp);
}

PushRequest Gradient(int worker, int64_t version, uint64_t id, std::mt19937* rng,
                     int64_t generation = 0) {
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> g(kFloats);
  for (float& x : g) x = normal(*rng);
  PushRequest req;
  req.set_layout_fingerprint(kLayout);
  req.set_worker_index(worker);
  req.set_version(version);
  req.set_request_id(id);
  req.set_num_examples(32);
  req.set_gradients(g.data(), g.size() * sizeof(float));
  req.set_generation(generation);
  return req;
}

// `req` pushed to `p`, its answer waited for 30 s at most (into *resp
// when given).
grpc::Status PushTo(Ps* p, const PushRequest& req, PushResponse* resp = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
  PushResponse ignored;
  return p->stub->Push(&ctx, req, resp != nullptr ? resp : &ignored);
}

// The two stores hold the same bits and have applied the same pushes.
void ExpectSameState(Ps* a, Ps* b) {
  StoreState x, y;
  ASSERT_TRUE(a->store.Snapshot(kLayout, &x).ok());
  ASSERT_TRUE(b->store.Snapshot(kLayout, &y).ok());
  EXPECT_EQ(x.version, y.version);
  ASSERT_EQ(x.values.size(), y.values.size());
  EXPECT_EQ(0, std::memcmp(x.values.data(), y.values.data(), x.values.size() * sizeof(float)));
  ASSERT_EQ(x.optimizer.slots.size(), y.optimizer.slots.size());
  for (size_t i = 0; i < x.optimizer.slots.size(); ++i) {
    EXPECT_EQ(x.optimizer.slots[i].values, y.optimizer.slots[i].values);
  }
  EXPECT_EQ(a->store.stats().applied_digest, b->store.stats().applied_digest);
  EXPECT_EQ(a->store.stats().pushes_applied, b->store.stats().pushes_applied);
}

PsStatsResponse Stats(Ps* p) {
  grpc::ClientContext ctx;
  PsStatsResponse st;
  EXPECT_TRUE(p->stub->GetStats(&ctx, PsStatsRequest(), &st).ok());
  return st;
}

// Waits (at most 20 s) for `done`.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 2000 && !done(); ++i) absl::SleepFor(absl::Milliseconds(10));
  return done();
}

// Updates over the backup's tcp data plane (as ps_server serves its backup
// store), or over gRPC where it has none.
class AsyncReplicationTest : public ::testing::TestWithParam<bool> {};

TEST_P(AsyncReplicationTest, PushesAreAnsweredOnlyOnceTheBackupHoldsThem) {
  const bool data_plane = GetParam();
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs(0, data_plane);
  Init(primary.get(), ASYNC, 2);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  // Seeded first: a push applied before the seed is taken reaches the
  // backup in the seed, not as a record (the data plane's count below).
  ASSERT_TRUE(Eventually([&] { return Stats(primary.get()).replicated_version() == 0; }));
  // Two workers push from threads of their own; every answer's version
  // must already be on the backup when the answer arrives.
  std::atomic<int> behind{0};
  auto worker = [&](int w) {
    std::mt19937 rng(100 + w);
    for (int i = 0; i < 40; ++i) {
      PushRequest req = Gradient(w, primary->store.stats().version, 1000 * (w + 1) + i, &rng);
      PushResponse resp;
      grpc::Status s = PushTo(primary.get(), req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_TRUE(resp.applied());
      if (backup->store.stats().version < resp.version()) ++behind;
    }
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  EXPECT_EQ(behind.load(), 0);
  EXPECT_EQ(primary->store.stats().version, 80);
  ExpectSameState(primary.get(), backup.get());
  const PsStatsResponse st = Stats(primary.get());
  EXPECT_EQ(st.replicated_version(), 80);
  EXPECT_EQ(st.backups_live(), 1);
  EXPECT_EQ(st.backups_set(), 1);
  EXPECT_GT(st.bytes_replicated(), 80 * kFloats * 4);
  if (data_plane) {  // every update (the seed goes over gRPC)
    EXPECT_GT(st.bytes_replicated_data_plane(), 80 * kFloats * 4);
  } else {
    EXPECT_EQ(st.bytes_replicated_data_plane(), 0);
  }
  EXPECT_TRUE(Stats(backup.get()).backup());
  // The same on /metrics.
  const std::string metrics = primary->metrics->Serialize();
  for (const char* line : {"pscluster_backups{", "pscluster_backups_live{",
                           "pscluster_replicated_version{"}) {
    const size_t at = metrics.find(line);
    ASSERT_NE(at, std::string::npos) << line << " not in\n" << metrics;
    const size_t value = metrics.find("} ", at) + 2;
    EXPECT_EQ(metrics.substr(value, metrics.find('\n', value) - value),
              std::string(line) == "pscluster_replicated_version{" ? "80" : "1")
        << line;
  }
  StopPs(primary.get());
  StopPs(backup.get());
}

INSTANTIATE_TEST_SUITE_P(Transports, AsyncReplicationTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "DataPlane" : "Grpc");
                         });

TEST(ReplicationTest, SyncStepsAreAnsweredOnlyOnceTheBackupHoldsTheirResult) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), SYNC, 2);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  std::atomic<int> behind{0};
  auto worker = [&](int w) {
    std::mt19937 rng(200 + w);
    for (int64_t v = 0; v < 30; ++v) {
      PushRequest req = Gradient(w, v, 5000 * (w + 1) + v, &rng);
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
      PushPullResponse resp;
      grpc::Status s = primary->stub->PushPull(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(resp.pull().version(), v + 1);
      if (backup->store.stats().version < resp.pull().version()) ++behind;
    }
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  EXPECT_EQ(behind.load(), 0);
  ExpectSameState(primary.get(), backup.get());
  StopPs(primary.get());
  StopPs(backup.get());
}

TEST(ReplicationTest, ALostBackupHoldsAnswersUntilThePrimaryIsToldToGoOnWithout) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), ASYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  std::mt19937 rng(3);
  uint64_t id = 0;
  auto push = [&] {
    grpc::Status s = PushTo(primary.get(), Gradient(0, primary->store.stats().version, ++id, &rng));
    EXPECT_TRUE(s.ok()) << s.error_message();
  };
  for (int i = 0; i < 5; ++i) push();
  const int port = backup->port;
  StopPs(backup.get());
  backup.reset();
  // The backup may be alive and promoted (this primary cut off): the push
  // is applied but not answered while the backup does not confirm it.
  std::atomic<bool> answered{false};
  std::thread held([&] {
    push();
    answered = true;
  });
  ASSERT_TRUE(Eventually([&] { return primary->store.stats().version == 6; }));
  absl::SleepFor(absl::Milliseconds(1500));  // past ReplicatorOptions::lost_after
  EXPECT_FALSE(answered.load());
  EXPECT_EQ(Stats(primary.get()).backups_live(), 0);  // counted as not live
  // The chief's word (it found the backup lost): the primary goes on alone.
  ASSERT_TRUE(SetBackups(primary.get(), {}).ok());
  held.join();
  EXPECT_TRUE(answered.load());
  for (int i = 0; i < 4; ++i) push();
  EXPECT_EQ(primary->store.stats().version, 10);
  // A backup started in its place (empty) and given again is seeded and
  // keeps up.
  backup = StartPs(port);
  ASSERT_NE(backup, nullptr);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  ASSERT_TRUE(Eventually([&] { return Stats(primary.get()).backups_live() == 1; }));
  for (int i = 0; i < 5; ++i) push();
  ASSERT_TRUE(Eventually([&] { return backup->store.stats().version == 15; }));
  ExpectSameState(primary.get(), backup.get());
  StopPs(primary.get());
  StopPs(backup.get());
}

TEST(ReplicationTest, ARestoreOfThePrimarySeedsTheBackupAgain) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), ASYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  std::mt19937 rng(8);
  uint64_t id = 0;
  auto push = [&](int64_t generation) {
    grpc::Status s = PushTo(
        primary.get(), Gradient(0, primary->store.stats().version, ++id, &rng, generation));
    EXPECT_TRUE(s.ok()) << s.error_message();
  };
  // A checkpoint at version 3, then 5 more pushes; then the chief rolls the
  // primary back to the checkpoint under generation 1.
  for (int i = 0; i < 3; ++i) push(0);
  grpc::ClientContext sctx;
  SnapshotRequest sreq;
  sreq.set_layout_fingerprint(kLayout);
  RestoreRequest restore;
  ASSERT_TRUE(primary->control->Snapshot(&sctx, sreq, restore.mutable_state()).ok());
  for (int i = 0; i < 5; ++i) push(0);
  ASSERT_TRUE(Eventually([&] { return backup->store.stats().version == 8; }));
  restore.mutable_state()->set_generation(1);
  restore.mutable_init()->set_layout_fingerprint(kLayout);
  restore.mutable_init()->mutable_optimizer()->set_name("adam");
  restore.mutable_init()->mutable_optimizer()->set_learning_rate(0.01f);
  restore.mutable_init()->mutable_optimizer()->set_beta1(0.9f);
  restore.mutable_init()->mutable_optimizer()->set_beta2(0.999f);
  restore.mutable_init()->mutable_optimizer()->set_epsilon(1e-7f);
  restore.mutable_init()->set_mode(ASYNC);
  restore.mutable_init()->set_num_workers(1);
  restore.mutable_init()->set_replicas_to_aggregate(1);
  *restore.mutable_init()->mutable_shards() = restore.state().shards();
  {
    grpc::ClientContext ctx;
    RestoreResponse resp;
    grpc::Status s = primary->control->Restore(&ctx, restore, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // The backup, at version 8 of generation 0, is ahead of the primary at
  // 3: a pull of version 3 must wait until it is seeded again.
  {
    PullRequest req;
    req.set_layout_fingerprint(kLayout);
    req.set_generation(1);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    PullResponse resp;
    ASSERT_TRUE(primary->stub->Pull(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.version(), 3);
    EXPECT_EQ(backup->store.stats().generation, 1);
    EXPECT_EQ(backup->store.stats().version, 3);
  }
  for (int i = 0; i < 4; ++i) push(1);
  ASSERT_TRUE(Eventually([&] { return backup->store.stats().version == 7; }));
  ExpectSameState(primary.get(), backup.get());
  StopPs(primary.get());
  StopPs(backup.get());
}

TEST(ReplicationTest, APromotedBackupAnswersWhatThePrimaryAppliedAndFencesTheOldGeneration) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), ASYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  std::mt19937 rng(4);
  std::vector<PushRequest> sent;
  std::vector<PushResponse> answers;
  for (uint64_t id = 1; id <= 6; ++id) {
    sent.push_back(Gradient(0, primary->store.stats().version, id, &rng));
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(primary->stub->Push(&ctx, sent.back(), &resp).ok());
    answers.push_back(resp);
  }
  StopPs(primary.get());  // lost
  {
    PromoteRequest req;
    req.set_layout_fingerprint(kLayout);
    req.set_generation(1);
    req.set_decides(true);
    grpc::ClientContext ctx;
    PromoteResponse resp;
    ASSERT_TRUE(backup->control->Promote(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.version(), 6);
  }
  // The last push's answer was lost: its resend is answered as it was.
  {
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(backup->stub->Push(&ctx, sent.back(), &resp).ok());
    EXPECT_TRUE(resp.applied());
    EXPECT_EQ(resp.version(), answers.back().version());
    EXPECT_EQ(backup->store.stats().version, 6);
  }
  // A new push computed on the old generation's weights is refused.
  {
    grpc::ClientContext ctx;
    PushResponse resp;
    EXPECT_EQ(backup->stub->Push(&ctx, Gradient(0, 6, 7, &rng), &resp).error_code(),
              grpc::StatusCode::ABORTED);
  }
  {
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(backup->stub->Push(&ctx, Gradient(0, 6, 8, &rng, 1), &resp).ok());
    EXPECT_EQ(resp.version(), 7);
  }
  StopPs(backup.get());
}

// A primary lost and restarted takes its backup's state as the primary it
// was (RestoreRequest.continues): a resent push it applied is answered as
// it was, under the same generation; an initialised ps refuses to.
TEST(ReplicationTest, ARestartedPrimaryContinuesFromItsBackup) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), ASYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  std::mt19937 rng(6);
  std::vector<PushRequest> sent;
  PushResponse last;
  for (uint64_t id = 1; id <= 5; ++id) {
    sent.push_back(Gradient(0, primary->store.stats().version, id, &rng));
    grpc::ClientContext ctx;
    ASSERT_TRUE(primary->stub->Push(&ctx, sent.back(), &last).ok());
  }
  const int port = primary->port;
  StopPs(primary.get());
  primary.reset();
  std::unique_ptr<Ps> restarted = StartPs(port);  // empty, at the same address
  ASSERT_NE(restarted, nullptr);
  RestoreRequest req;
  {
    grpc::ClientContext ctx;
    SnapshotRequest snap;
    snap.set_layout_fingerprint(kLayout);
    ASSERT_TRUE(backup->control->Snapshot(&ctx, snap, req.mutable_state()).ok());
  }
  req.mutable_init()->set_layout_fingerprint(kLayout);
  *req.mutable_init()->mutable_shards() = req.state().shards();
  req.mutable_init()->mutable_optimizer()->set_name("adam");
  req.mutable_init()->mutable_optimizer()->set_learning_rate(0.01f);
  req.mutable_init()->mutable_optimizer()->set_beta1(0.9f);
  req.mutable_init()->mutable_optimizer()->set_beta2(0.999f);
  req.mutable_init()->mutable_optimizer()->set_epsilon(1e-7f);
  req.mutable_init()->set_mode(ASYNC);
  req.mutable_init()->set_num_workers(1);
  req.mutable_init()->set_replicas_to_aggregate(1);
  req.set_continues(true);
  {
    grpc::ClientContext ctx;
    RestoreResponse resp;
    grpc::Status s = restarted->control->Restore(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.version(), 5);
  }
  ExpectSameState(restarted.get(), backup.get());
  {  // the last answer was lost: the resend is answered as it was
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(restarted->stub->Push(&ctx, sent.back(), &resp).ok());
    EXPECT_TRUE(resp.applied());
    EXPECT_EQ(resp.version(), last.version());
    EXPECT_EQ(restarted->store.stats().version, 5);
    EXPECT_EQ(restarted->store.stats().pushes_duplicate, 1);
  }
  {  // and training goes on under the same generation
    grpc::ClientContext ctx;
    PushResponse resp;
    ASSERT_TRUE(restarted->stub->Push(&ctx, Gradient(0, 5, 6, &rng), &resp).ok());
    EXPECT_EQ(resp.version(), 6);
  }
  {  // now initialised: it has state of its own to answer for
    grpc::ClientContext ctx;
    RestoreResponse resp;
    grpc::Status s = restarted->control->Restore(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("only a restarted (empty) ps continues"), std::string::npos)
        << s.error_message();
  }
  StopPs(restarted.get());
  StopPs(backup.get());
}

TEST(ReplicationTest, APrimaryWhoseBackupIsAPrimaryWasReplacedAndBecomesABackup) {
  // Fencing (docs/replication.md): `old` was cut off while its backup
  // `promoted` took its place. Its updates are refused, so it answers no
  // push since, and once demoted it is seeded by the new primary.
  std::unique_ptr<Ps> old = StartPs(), promoted = StartPs();
  Init(old.get(), ASYNC, 1);
  Init(promoted.get(), ASYNC, 1);
  // A primary takes neither seeds nor replicated updates: ALREADY_EXISTS.
  ReplicateRequest rep;
  rep.set_layout_fingerprint(kLayout);
  rep.add_updates()->set_version(0);
  grpc::ClientContext rctx;
  ReplicateResponse rresp;
  EXPECT_EQ(promoted->control->Replicate(&rctx, rep, &rresp).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  ASSERT_TRUE(SetBackups(old.get(), {promoted->address()}).ok());
  std::mt19937 rng(6);
  grpc::Status pushed;
  ASSERT_TRUE(Eventually([&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    PushResponse resp;
    pushed = old->stub->Push(&ctx, Gradient(0, 0, 1, &rng), &resp);
    return !pushed.ok();
  }));
  EXPECT_EQ(pushed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(pushed.error_message().find("this ps was replaced"), std::string::npos)
      << pushed.error_message();
  EXPECT_FALSE(Stats(promoted.get()).backup());
  EXPECT_EQ(promoted->store.stats().version, 0);
  // An empty backup address is refused.
  EXPECT_EQ(SetBackups(old.get(), {""}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Demoted, it is a backup: the new primary seeds it.
  grpc::ClientContext dctx;
  DemoteRequest dreq;
  dreq.set_layout_fingerprint(kLayout);
  DemoteResponse dresp;
  ASSERT_TRUE(old->control->Demote(&dctx, dreq, &dresp).ok());
  EXPECT_TRUE(Stats(old.get()).backup());
  EXPECT_EQ(Stats(old.get()).backups_set(), 0);
  ASSERT_TRUE(SetBackups(promoted.get(), {old->address()}).ok());
  for (uint64_t id = 2; id < 5; ++id) {
    grpc::Status s = PushTo(promoted.get(), Gradient(0, promoted->store.stats().version, id, &rng));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(Eventually([&] { return old->store.stats().version == 3; }));
  ExpectSameState(promoted.get(), old.get());
  StopPs(old.get());
  StopPs(promoted.get());
}

// A move back (docs/replication.md): the store that served the shards is
// demoted with a step applied that its backup, promoted next, does not
// hold yet (the record was still on its way). It must answer no worker
// with that version, whenever the worker's call reaches it; the worker
// then resends its push where the shards are. Answered, the worker pushed
// the next version to the promoted store, still one behind: "gradient
// version 1276 is from the future: this ps is at version 1275"
// (tests/netns_cluster_test.sh 2c, ps:0 cut off and its shards moved back).
TEST(ReplicationTest, ADemotedPrimaryAnswersNoVersionItsBackupMayLack) {
  std::unique_ptr<Ps> primary = StartPs(), backup = StartPs();
  Init(primary.get(), SYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {backup->address()}).ok());
  ASSERT_TRUE(Eventually([&] { return Stats(primary.get()).replicated_version() == 0; }));
  // The backup stops confirming: the next step is applied (a sync push is
  // answered once taken; the step's result is pulled), not confirmed.
  StopPs(backup.get());
  std::mt19937 rng(8);
  ASSERT_TRUE(PushTo(primary.get(), Gradient(0, 0, 1, &rng)).ok());
  ASSERT_EQ(primary->store.stats().version, 1);
  // Demoted, as MoveBack does before it promotes the backup: the
  // replicator is stopped and gone.
  grpc::ClientContext dctx;
  DemoteRequest dreq;
  dreq.set_layout_fingerprint(kLayout);
  DemoteResponse dresp;
  ASSERT_TRUE(primary->control->Demote(&dctx, dreq, &dresp).ok());
  // A pull of the step's result that reaches it now is refused, not
  // answered from the version it holds.
  PullRequest req;
  req.set_layout_fingerprint(kLayout);
  req.set_min_version(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  PullResponse resp;
  const grpc::Status pulled = primary->stub->Pull(&ctx, req, &resp);
  EXPECT_EQ(pulled.error_code(), grpc::StatusCode::UNAVAILABLE)
      << "answered version " << resp.version();
  // So is one that read the version while the store was still the primary
  // and comes to wait for the backups only after the replicator is gone
  // (the cut_d run's race: Demote, then StopReplicator, between the two).
  EXPECT_EQ(
      primary->service->shard().AwaitReplicated(1, absl::Now() + absl::Seconds(1)).error_code(),
      grpc::StatusCode::UNAVAILABLE);
  StopPs(primary.get());
}

// An answer held for a backup that stopped answering is not released as
// confirmed when the chief sets another backup in its place (SetBackups
// stops the replicator it waited on): it waits for the new one, seeded
// with a state that holds its version.
TEST(ReplicationTest, AnAnswerHeldForALostBackupWaitsForTheBackupSetInItsPlace) {
  std::unique_ptr<Ps> primary = StartPs(), lost = StartPs(), fresh = StartPs();
  Init(primary.get(), SYNC, 1);
  ASSERT_TRUE(SetBackups(primary.get(), {lost->address()}).ok());
  ASSERT_TRUE(Eventually([&] { return Stats(primary.get()).replicated_version() == 0; }));
  StopPs(lost.get());
  grpc::Status answered;
  std::atomic<int64_t> fresh_at_answer{-1};
  std::thread held([&] {
    std::mt19937 rng(9);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    PushPullResponse resp;
    answered = primary->stub->PushPull(&ctx, Gradient(0, 0, 1, &rng), &resp);
    fresh_at_answer = fresh->store.stats().version;
  });
  ASSERT_TRUE(Eventually([&] { return primary->store.stats().version == 1; }));
  // By now the answer waits on the replicator of the lost backup (without
  // the fix, its Stop released it before `fresh` was seeded).
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(SetBackups(primary.get(), {fresh->address()}).ok());
  held.join();
  ASSERT_TRUE(answered.ok()) << answered.error_message();
  EXPECT_GE(fresh_at_answer.load(), 1);
  StopPs(primary.get());
  StopPs(fresh.get());
}

// --ps_replicas=2 (docs/replication.md, Fencing): `old` keeps `first` and
// `second`; `first` is promoted while `old` is cut off from it but not from
// `second`. Once `first` seeded `second` under its higher primary term,
// `second` refuses what `old` sends it with ALREADY_EXISTS, so `old` answers
// no push it applied alone, and `second` holds what `first` holds.
// Parameters: whether `old` reaches `second` with records (it was cut off
// from `first` before the promotion) or with a fresh seed (after it); and
// the generation `first` is promoted under: 0 when the fail-over rolls
// nothing back, 1 when it does (the seed, of an older generation too, must
// still be refused as a replaced primary's, not as a place for no backup,
// which `old` would go on without).
struct FencingCase {
  bool seed = false;
  int64_t generation = 0;
};

void PrintTo(const FencingCase& c, std::ostream* os) {
  *os << (c.seed ? "seed" : "records") << ", generation " << c.generation;
}

class FencingTest : public ::testing::TestWithParam<FencingCase> {};

TEST_P(FencingTest, ABackupSeededByAPromotedStoreRefusesTheOldPrimary) {
  const FencingCase c = GetParam();
  std::unique_ptr<Ps> old = StartPs(), first = StartPs(0, true), second = StartPs(0, true);
  Init(old.get(), ASYNC, 1);
  ASSERT_TRUE(SetBackups(old.get(), {first->address(), second->address()}).ok());
  std::mt19937 rng(8);
  for (uint64_t id = 1; id <= 3; ++id) {
    grpc::Status s = PushTo(old.get(), Gradient(0, old->store.stats().version, id, &rng));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(Eventually([&] { return second->store.stats().version == 3; }));
  // What `old` still reaches: `second` only. Cut off before the promotion,
  // its replicator seeds `second` now and sends it records afterwards.
  auto cut_off = [&] { return SetBackups(old.get(), {second->address()}); };
  if (!c.seed) {
    ASSERT_TRUE(cut_off().ok());
    ASSERT_TRUE(Eventually([&] {
      const PsStatsResponse st = Stats(old.get());
      return st.backups_live() == 1 && st.replicated_version() == 3;
    }));
  }
  grpc::ClientContext pctx;
  PromoteRequest preq;
  preq.set_layout_fingerprint(kLayout);
  preq.set_generation(c.generation);
  preq.set_primary_term(1);
  PromoteResponse presp;
  ASSERT_TRUE(first->control->Promote(&pctx, preq, &presp).ok());
  EXPECT_EQ(Stats(first.get()).primary_term(), 1);
  ASSERT_TRUE(SetBackups(first.get(), {second->address()}).ok());
  ASSERT_TRUE(Eventually([&] {
    const PsStatsResponse st = Stats(second.get());
    return st.primary_term() == 1 && st.generation() == c.generation;
  }));
  if (c.seed) {
    ASSERT_TRUE(cut_off().ok());
  }
  {
    grpc::Status s = PushTo(old.get(), Gradient(0, 3, 4, &rng));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_NE(s.error_message().find("this ps was replaced"), std::string::npos)
        << s.error_message();
  }
  // Applied alone, never answered; or, when `old` seeds `second` after the
  // promotion, refused before it is applied if the seed's refusal came back
  // first (both orders are the replaced primary's: nothing reaches `second`).
  if (c.seed) {
    EXPECT_TRUE(old->store.stats().version == 3 || old->store.stats().version == 4)
        << old->store.stats().version;
  } else {
    EXPECT_EQ(old->store.stats().version, 4);
  }
  EXPECT_EQ(second->store.stats().version, 3);
  EXPECT_EQ(second->store.stats().primary_term, 1);
  // The new primary's pushes reach `second`, which equals it bit for bit.
  for (uint64_t id = 5; id <= 6; ++id) {
    grpc::Status s =
        PushTo(first.get(), Gradient(0, first->store.stats().version, id, &rng, c.generation));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(Eventually([&] { return second->store.stats().version == 5; }));
  ExpectSameState(first.get(), second.get());
  StopPs(old.get());
  StopPs(first.get());
  StopPs(second.get());
}

INSTANTIATE_TEST_SUITE_P(OldPrimarySends, FencingTest,
                         ::testing::Values(FencingCase{false, 0}, FencingCase{false, 1},
                                           FencingCase{true, 0}, FencingCase{true, 1}),
                         [](const ::testing::TestParamInfo<FencingCase>& info) {
                           return absl::StrCat(info.param.seed ? "Seed" : "Records", "Generation",
                                               info.param.generation);
                         });

// Over the data plane a record's gradient is its payload_bytes of the
// frame's payload: records that do not add up to the payload, or carry a
// gradient of their own as well, are refused whole.
TEST(ReplicationTest, DataPlaneRecordsMustAddUpToThePayload) {
  std::unique_ptr<Ps> backup = StartPs();
  ReplicateRequest req;
  req.set_layout_fingerprint(kLayout);
  AppliedUpdateRecord* r = req.add_updates();
  r->set_version(0);
  r->set_payload_bytes(8);
  ReplicateResponse resp;
  const std::string twelve(12, '\0'), four(4, '\0');
  for (absl::string_view payload : {absl::string_view(twelve), absl::string_view(four)}) {
    grpc::Status s = backup->service->control().DoReplicate(req, payload, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << payload.size();
    EXPECT_NE(s.error_message().find("payload"), std::string::npos) << s.error_message();
  }
  r->set_payload_bytes(UINT64_MAX);  // would wrap a sum
  EXPECT_EQ(backup->service->control().DoReplicate(req, twelve, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  r->set_payload_bytes(8);
  r->set_gradient(std::string(8, '\0'));
  EXPECT_EQ(backup->service->control().DoReplicate(req, absl::string_view(twelve).substr(0, 8), &resp)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(backup->store.stats().version, 0);
  StopPs(backup.get());
}

}  // namespace
}  // namespace pscluster
