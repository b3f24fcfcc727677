// Exactly-once updates: a worker whose replies get lost (so it sends the
// same push again) or whose pushes arrive twice must leave the parameters
// bit for bit where a clean run leaves them. Real gRPC servers (two ps, in
// this process) and the worker's own PsClient, with its fault injection.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/task_server.h"
#include "gtest/gtest.h"
#include "model/gradient_watermark.h"
#include "model/model_spec.h"
#include "model/params_watermark.h"
#include "model/placement.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/data_plane_server.h"
#include "ps_server/ps_service.h"
#include "tests/faults/every_nth_faults.h"
#include "tests/local_cluster.h"
#include "update/parameter_store.h"
#include "wire/codec.h"
#include "wire/data_plane.h"
#include "wire/ps_client.h"

namespace pscluster {
namespace {

struct PsProcessInside {
  ParameterStore store;
  std::unique_ptr<Metrics> metrics = *Metrics::Start("", "ps", MetricsRole::kPs);
  std::unique_ptr<PsService> service;
  std::unique_ptr<TaskServer> server;
  std::unique_ptr<DataPlaneServer> data;  // transport kTcp
  int port = 0;
};

struct Outcome {
  std::vector<float> params;
  std::vector<float> worker_params;  // worker 0's, after its last PushPullAll
  int64_t duplicates = 0;
  int64_t resends = 0;
  int64_t version = 0;
  // Priority pulls: calls whose weights were torn, and calls whose
  // `answered` came other than once.
  int64_t torn = 0;
  int64_t answered_wrong = 0;
};

// Priority pulls: how the weights a "forward pass" read while they
// arrived compare with the call's final weights.
struct ArrivalLog {
  int64_t torn = 0;
  int64_t answered_wrong = 0;
};

// Trains `steps` steps of two workers with seeded pseudo-gradients against
// two fresh ps and returns the final parameters. `push` and `pull`: the
// wire encodings (wire/codec.h); `transport`: the push-pulls' path.
// A push-pull whose gradient leaves while "backprop" still writes it: the
// gradient buffer holds NaN (which the ps refuses) until a suffix is
// copied in and marked final, five suffixes in all, last first.
//
// With `log` (priority pulls), the answer's weights are written as they
// arrive, and a "forward pass" reads each prefix [0, to) of the weights as
// soon as it is marked arrived: what it read must be the call's final
// weights (unless the call says they were torn), and `answered` must come
// once, with last_push_applied()'s value.
absl::Status PushPullDuringBackprop(PsClient& client, int worker, const std::vector<float>& grads,
                                    float* params, const Placement& placement,
                                    ArrivalLog* log) {
  const int64_t n = static_cast<int64_t>(grads.size());
  std::vector<float> buffer(n, NAN);
  GradientWatermark ready;
  ready.Reset(n);
  absl::Notification params_free;
  ParamsWatermark arrived(n);
  std::atomic<int> answers{0};
  std::atomic<bool> applied{false};
  PsClient::Overlap overlap{&ready, &params_free};
  if (log != nullptr) {
    overlap.arrived = &arrived;
    overlap.answered = [&](bool a) {
      applied = a;
      ++answers;
    };
  }
  absl::Status s;
  std::thread push([&] {
    s = client.PushPullAll(worker, 64, buffer.data(), params, absl::Seconds(20), &overlap);
  });
  int64_t end = n;
  for (int k = 4; k >= 0; --k) {
    const int64_t from = n * k / 5;
    std::copy(grads.begin() + from, grads.begin() + end, buffer.begin() + from);
    ready.MarkFinalFrom(from);
    end = from;
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (log == nullptr) {
    params_free.Notify();
    push.join();
    return s;
  }
  arrived.Reset();
  params_free.Notify();
  std::vector<int64_t> ends;
  for (const Shard& sh : placement.shards) ends.push_back(sh.offset + sh.size);
  std::sort(ends.begin(), ends.end());
  std::vector<std::vector<float>> seen;
  for (int64_t to : ends) {
    if (!arrived.WaitArrived(to).ok()) break;  // the call failed
    seen.emplace_back(params, params + to);
  }
  push.join();
  if (!s.ok()) return s;
  EXPECT_EQ(arrived.arrived(), n);
  if (answers != 1 || applied != client.last_push_applied()) ++log->answered_wrong;
  if (client.last_pull_torn()) {
    ++log->torn;
  } else {
    for (const std::vector<float>& prefix : seen) {
      EXPECT_EQ(std::memcmp(prefix.data(), params, prefix.size() * sizeof(float)), 0)
          << "weights [0, " << prefix.size() << ") read as arrived differ from the call's";
    }
  }
  return s;
}

Outcome Train(UpdateMode mode, int lose_every, int duplicate_every,
              Codec push = Codec::kFloat32, Codec pull = Codec::kFloat32,
              Transport transport = TRANSPORT_GRPC, bool overlap = false,
              bool priority_pull = false) {
  const ModelSpec spec = *ModelByName("mlp");
  const Placement placement = PlaceVariables(spec, 2, PlacementOptions());
  std::vector<std::unique_ptr<PsProcessInside>> ps;
  std::string cluster = "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": "
                        "[\"127.0.0.1:2\", \"127.0.0.1:3\"], \"ps\": [";
  for (int i = 0; i < 2; ++i) {
    auto p = std::make_unique<PsProcessInside>();
    p->service = std::make_unique<PsService>(&p->store, p->metrics.get());
    p->port = testing::FreePort();
    absl::StatusOr<std::unique_ptr<TaskServer>> server =
        TaskServer::Start(p->port, p->service->grpc_services());
    EXPECT_TRUE(server.ok()) << server.status();
    p->server = *std::move(server);
    if (transport == TRANSPORT_TCP) {
      absl::StatusOr<std::unique_ptr<DataPlaneServer>> data =
          DataPlaneServer::Start(0, p->service.get(), nullptr, uint64_t{1} << 30);
      EXPECT_TRUE(data.ok()) << data.status();
      p->data = *std::move(data);
      p->service->shard().set_data_port(p->data->port());
    }
    cluster += absl::StrCat(i ? ", " : "", "\"127.0.0.1:", p->port, "\"");
    ps.push_back(std::move(p));
  }
  cluster += "]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
  absl::StatusOr<TfConfig> config = ParseTfConfig(cluster, "test");
  EXPECT_TRUE(config.ok()) << config.status();

  const std::vector<float> initial = InitialParameters(spec, 7);
  for (int i = 0; i < 2; ++i) {
    InitRequest req;
    req.set_layout_fingerprint(placement.fingerprint);
    std::vector<float> wire(placement.floats_of_ps[i]);
    GatherForPs(placement, i, initial.data(), wire.data());
    for (int s : placement.shards_of_ps[i]) {
      ShardSpec* sh = req.add_shards();
      sh->set_variable(placement.shards[s].variable);
      sh->set_size(placement.shards[s].size);
    }
    req.set_values(wire.data(), wire.size() * sizeof(float));
    req.mutable_optimizer()->set_name("adam");
    req.mutable_optimizer()->set_learning_rate(0.01f);
    req.mutable_optimizer()->set_beta1(0.9f);
    req.mutable_optimizer()->set_beta2(0.999f);
    req.mutable_optimizer()->set_epsilon(1e-7f);
    req.set_mode(mode);
    req.set_num_workers(2);
    req.set_replicas_to_aggregate(2);
    auto stub = PsControl::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", ps[i]->port)));
    grpc::ClientContext ctx;
    InitResponse resp;
    const grpc::Status init = stub->Init(&ctx, req, &resp);
    EXPECT_TRUE(init.ok()) << "Init of ps:" << i << " (port " << ps[i]->port
                           << "): " << init.error_code() << " " << init.error_message();
  }

  // Two workers, stepping alternately from one thread each: their pushes
  // interleave the same way in every run, as sync needs.
  PsClientOptions faulty;
  faulty.retry.initial_backoff = absl::Milliseconds(1);
  testing::EveryNthFaults faults(lose_every, duplicate_every);
  faulty.faults = &faults;
  faulty.push_codec.codec = push;
  faulty.pull_codec.codec = pull;
  faulty.transport = transport;
  faulty.push_codec.min_elements = faulty.pull_codec.min_elements = 1024;
  Outcome out;
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int w = 0; w < 2; ++w) {
    faulty.worker_index = w;
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        PsClient::Create(config->cluster, &placement, faulty);
    EXPECT_TRUE(c.ok());
    workers.push_back(*std::move(c));
  }
  std::vector<std::vector<float>> params(2, std::vector<float>(spec.num_parameters));
  for (int w = 0; w < 2; ++w) {
    const absl::Status pulled = workers[w]->PullAll(0, params[w].data(), absl::Seconds(10));
    EXPECT_TRUE(pulled.ok()) << pulled;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<std::vector<float>> grads(2, std::vector<float>(spec.num_parameters));
  constexpr int kSteps = 40;
  std::vector<ArrivalLog> arrivals(2);
  for (int step = 0; step < kSteps; ++step) {
    for (auto& g : grads) {
      for (float& x : g) x = normal(rng);
    }
    auto push_pull = [&](int w) {
      if (overlap) {
        return PushPullDuringBackprop(*workers[w], w, grads[w], params[w].data(), placement,
                                      priority_pull ? &arrivals[w] : nullptr);
      }
      return workers[w]->PushPullAll(w, 64, grads[w].data(), params[w].data(),
                                     absl::Seconds(20));
    };
    if (mode == ASYNC) {
      for (int w = 0; w < 2; ++w) {
        absl::Status s = push_pull(w);
        EXPECT_TRUE(s.ok()) << s;
      }
    } else {
      // Both pushes of a sync step must be in flight together.
      std::vector<absl::Status> st(2);
      std::thread other([&] { st[1] = push_pull(1); });
      st[0] = push_pull(0);
      other.join();
      EXPECT_TRUE(st[0].ok()) << st[0];
      EXPECT_TRUE(st[1].ok()) << st[1];
    }
  }
  out.worker_params = params[0];
  for (const ArrivalLog& a : arrivals) {
    out.torn += a.torn;
    out.answered_wrong += a.answered_wrong;
  }
  EXPECT_TRUE(workers[0]->PullAll(0, params[0].data(), absl::Seconds(10)).ok());
  out.params = params[0];
  out.version = workers[0]->version();
  for (int w = 0; w < 2; ++w) out.resends += workers[w]->resends();
  for (auto& p : ps) {
    out.duplicates += p->store.stats().pushes_duplicate;
    p->store.Cancel();
    p->data.reset();
    p->server->Stop(absl::ZeroDuration());
  }
  return out;
}

void ExpectBitForBit(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << "the parameters differ from the clean run's";
}

TEST(ExactlyOnceTest, SyncLostRepliesAndDuplicatesChangeNothing) {
  const Outcome clean = Train(SYNC, 0, 0);
  const Outcome faulty = Train(SYNC, 3, 5);
  EXPECT_EQ(clean.duplicates, 0);
  EXPECT_GT(faulty.resends, 20);
  // Every resend reached a ps that had the push already.
  EXPECT_EQ(faulty.duplicates, faulty.resends);
  EXPECT_EQ(faulty.version, clean.version);
  ExpectBitForBit(faulty.params, clean.params);
}

TEST(ExactlyOnceTest, AsyncLostRepliesAndDuplicatesChangeNothing) {
  const Outcome clean = Train(ASYNC, 0, 0);
  const Outcome faulty = Train(ASYNC, 2, 3);
  EXPECT_GT(faulty.resends, 30);
  EXPECT_EQ(faulty.duplicates, faulty.resends);
  EXPECT_EQ(faulty.version, clean.version);
  ExpectBitForBit(faulty.params, clean.params);
}

// Compressed pushes (encoded once, resent as they are) and change pulls
// (the ps answers a resend with the change it sent before, not a new one):
// lost replies and duplicates still change nothing, on the ps nor in the
// weights the worker tracks from the changes it applied.
TEST(ExactlyOnceTest, CompressedPushesAndChangePullsSurviveResends) {
  for (UpdateMode mode : {SYNC, ASYNC}) {
    const Outcome clean = Train(mode, 0, 0, Codec::kTopK, Codec::kInt8);
    const Outcome faulty = Train(mode, 3, 5, Codec::kTopK, Codec::kInt8);
    EXPECT_GT(faulty.resends, 20);
    EXPECT_EQ(faulty.duplicates, faulty.resends);
    EXPECT_EQ(faulty.version, clean.version);
    ExpectBitForBit(faulty.params, clean.params);
    ExpectBitForBit(faulty.worker_params, clean.worker_params);
    // The changes the worker added up track the exact weights closely (in
    // sync mode its last pull is of the final weights; async, the other
    // worker pushed once more after it).
    if (mode != SYNC) continue;
    double worst = 0;
    for (size_t i = 0; i < clean.params.size(); ++i) {
      worst = std::max(worst, std::fabs(double{clean.worker_params[i]} - clean.params[i]));
    }
    std::printf("change pulls: largest |worker - ps| weight %.3g\n", worst);
    EXPECT_LT(worst, 1e-4) << "change pulls drifted from the ps's weights";
  }
}

// The tcp data plane (--transport=tcp) carries the same calls: with lost
// replies and duplicates, fp32 and compressed, it ends bit for bit where a
// clean gRPC run ends.
TEST(ExactlyOnceTest, TcpDataPlaneEndsWhereGrpcEnds) {
  for (UpdateMode mode : {SYNC, ASYNC}) {
    for (auto [push, pull] : {std::pair{Codec::kFloat32, Codec::kFloat32},
                              std::pair{Codec::kTopK, Codec::kInt8}}) {
      SCOPED_TRACE(absl::StrCat(mode == SYNC ? "sync " : "async ", CodecName(push), "/",
                                CodecName(pull)));
      const Outcome grpc = Train(mode, 0, 0, push, pull, TRANSPORT_GRPC);
      const Outcome tcp = Train(mode, 3, 5, push, pull, TRANSPORT_TCP);
      EXPECT_GT(tcp.resends, 20);
      EXPECT_EQ(tcp.duplicates, tcp.resends);
      EXPECT_EQ(tcp.version, grpc.version);
      ExpectBitForBit(tcp.params, grpc.params);
      ExpectBitForBit(tcp.worker_params, grpc.worker_params);
    }
  }
}

// Gradients streamed while backprop writes them (the trainer's push
// overlap: shards last first as they become final), with lost replies and
// duplicates, fp32 and compressed: the same end, bit for bit, as a clean
// gRPC run of whole gradients. A shard read before it is final would be
// NaN, which the ps refuses.
TEST(ExactlyOnceTest, GradientsStreamedDuringBackpropEndWhereWholeOnesEnd) {
  for (UpdateMode mode : {SYNC, ASYNC}) {
    for (auto [push, pull] : {std::pair{Codec::kFloat32, Codec::kFloat32},
                              std::pair{Codec::kTopK, Codec::kInt8},
                              std::pair{Codec::kSign, Codec::kFloat32}}) {
      SCOPED_TRACE(absl::StrCat(mode == SYNC ? "sync " : "async ", CodecName(push), "/",
                                CodecName(pull)));
      const Outcome grpc = Train(mode, 0, 0, push, pull, TRANSPORT_GRPC);
      const Outcome streamed = Train(mode, 3, 5, push, pull, TRANSPORT_TCP, /*overlap=*/true);
      EXPECT_GT(streamed.resends, 20);
      EXPECT_EQ(streamed.duplicates, streamed.resends);
      EXPECT_EQ(streamed.version, grpc.version);
      ExpectBitForBit(streamed.params, grpc.params);
      ExpectBitForBit(streamed.worker_params, grpc.worker_params);
    }
  }
}

// Priority pulls: the answer's weights are written shard by shard as they
// arrive and marked, and each prefix marked arrived already holds the
// call's final weights; lost replies and duplicates (answers thrown away
// after their weights were written: "torn", so the trainer does the step
// again) still end bit for bit where clean gRPC runs end. bf16 pulls are
// decoded shard by shard too; int8 change pulls once whole.
TEST(ExactlyOnceTest, WeightsWrittenAsTheyArriveEndWhereWholeOnesEnd) {
  for (UpdateMode mode : {SYNC, ASYNC}) {
    for (auto [push, pull] : {std::pair{Codec::kFloat32, Codec::kFloat32},
                              std::pair{Codec::kFloat32, Codec::kBfloat16},
                              std::pair{Codec::kTopK, Codec::kInt8}}) {
      SCOPED_TRACE(absl::StrCat(mode == SYNC ? "sync " : "async ", CodecName(push), "/",
                                CodecName(pull)));
      const Outcome grpc = Train(mode, 0, 0, push, pull, TRANSPORT_GRPC);
      const Outcome clean = Train(mode, 0, 0, push, pull, TRANSPORT_TCP, true, true);
      EXPECT_EQ(clean.torn, 0);
      EXPECT_EQ(clean.answered_wrong, 0);
      ExpectBitForBit(clean.params, grpc.params);
      ExpectBitForBit(clean.worker_params, grpc.worker_params);
      const Outcome faulty = Train(mode, 3, 5, push, pull, TRANSPORT_TCP, true, true);
      EXPECT_GT(faulty.resends, 20);
      EXPECT_EQ(faulty.duplicates, faulty.resends);
      EXPECT_EQ(faulty.answered_wrong, 0);
      // Every thrown-away answer had written weights (fp32 and bf16 as
      // they arrive); change pulls write only a whole answer.
      if (pull == Codec::kInt8) {
        EXPECT_EQ(faulty.torn, 0);
      } else {
        EXPECT_GT(faulty.torn, 20);
      }
      EXPECT_EQ(faulty.version, grpc.version);
      ExpectBitForBit(faulty.params, grpc.params);
      ExpectBitForBit(faulty.worker_params, grpc.worker_params);
    }
  }
}

}  // namespace
}  // namespace pscluster
