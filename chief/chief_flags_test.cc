#include "chief/chief_flags.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "chief/ps_run.h"
#include "chief/weights_export.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/model_spec.h"

namespace pscluster {
namespace {

// A chief, `ps` ps tasks and `workers` workers.
TfConfig Cluster(int ps, int workers) {
  std::string json = R"({"cluster": {"chief": ["h:1000"])";
  auto list = [&](const char* job, int n, int port) {
    if (n == 0) return;
    json += std::string(", \"") + job + "\": [";
    for (int i = 0; i < n; ++i) json += (i ? ", \"h:" : "\"h:") + std::to_string(port + i) + "\"";
    json += "]";
  };
  list("ps", ps, 2000);
  list("worker", workers, 3000);
  json += R"(}, "task": {"type": "chief", "index": 0}})";
  absl::StatusOr<TfConfig> config = ParseTfConfig(json, "TF_CONFIG");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : TfConfig();
}

// The error of `flags` over 2 ps and 2 workers (OK: empty).
std::string ErrorOf(const ChiefFlags& flags, const TfConfig& config = Cluster(2, 2)) {
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(flags, config);
  if (opt.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(opt.status())) << opt.status();
  return std::string(opt.status().message());
}

TEST(MakeChiefOptionsTest, TheDefaultsMakeTheDocumentedRun) {
  std::vector<std::string> warnings;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(ChiefFlags(), Cluster(2, 2), &warnings);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(opt->plan.model(), "cnn");
  EXPECT_FALSE(opt->plan.model_json().empty());
  EXPECT_EQ(opt->plan.epochs(), 6);
  EXPECT_EQ(opt->plan.batch_size(), 64);  // 128 over 2 workers
  EXPECT_EQ(opt->plan.mode(), SYNC);
  EXPECT_EQ(opt->plan.strategy(), PARAMETER_SERVER);
  EXPECT_EQ(opt->plan.min_shard_bytes(), 64 << 10);
  EXPECT_EQ(opt->plan.transport(), TRANSPORT_TCP);  // auto: the data plane
  EXPECT_TRUE(opt->plan.push_overlap());
  EXPECT_TRUE(opt->plan.priority_pull());
  EXPECT_EQ(opt->optimizer.name(), "adam");
  EXPECT_FLOAT_EQ(opt->optimizer.learning_rate(), 0.002f);
  EXPECT_EQ(opt->optimizer.decay_steps(), 1000);
  EXPECT_EQ(opt->replicas_to_aggregate, 0);
  EXPECT_EQ(opt->wait_for_cluster, absl::Seconds(120));
  EXPECT_EQ(opt->heartbeat_timeout, absl::Seconds(3));
  EXPECT_EQ(opt->heartbeat_interval, absl::Milliseconds(500));
  EXPECT_EQ(opt->checkpoint_every_steps, 200);
  EXPECT_EQ(opt->keep_checkpoints, 3);
  EXPECT_EQ(opt->async_lr_scaling, AsyncLrScaling::kSqrt);
  EXPECT_EQ(opt->nonfinite, NONFINITE_REJECT);
  EXPECT_TRUE(opt->checkpoint_dir.empty());
  EXPECT_TRUE(opt->export_path.empty());
}

TEST(MakeChiefOptionsTest, AGoodSetOfEveryKindIsTaken) {
  ChiefFlags f;
  f.model = "mlp";
  f.epochs = 3;
  f.batch_size = 100;
  f.mode = "async";
  f.optimizer = "momentum";
  f.momentum = 0.5;
  f.push_codec = "topk";
  f.topk_fraction = 0.1;
  f.pull_codec = "bf16";
  f.transport = "grpc";
  f.heartbeat_timeout_s = 1;
  f.checkpoint_every_secs = 30;
  f.async_lr_scaling = "linear";
  f.nonfinite_gradients = "skip_step";
  f.logdir = "/tmp/run";
  std::vector<std::string> warnings;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(1, 3), &warnings);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->plan.batch_size(), 33);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "--batch_size=100 is not a multiple of 3 workers: 33 per worker, 99 per step");
  EXPECT_EQ(opt->plan.mode(), ASYNC);
  EXPECT_EQ(opt->plan.transport(), TRANSPORT_GRPC);
  EXPECT_FLOAT_EQ(opt->plan.topk_fraction(), 0.1f);
  EXPECT_EQ(opt->optimizer.name(), "momentum");
  EXPECT_EQ(opt->heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(opt->checkpoint_every, absl::Seconds(30));
  EXPECT_EQ(opt->async_lr_scaling, AsyncLrScaling::kLinear);
  EXPECT_EQ(opt->nonfinite, NONFINITE_SKIP_STEP);
  EXPECT_EQ(opt->checkpoint_dir, "/tmp/run/checkpoints");
  EXPECT_EQ(opt->export_path, "/tmp/run/model.safetensors");
}

TEST(MakeChiefOptionsTest, TheSparseTablesOptimizerTakesItsOwnRateDecayAndStrengths) {
  ChiefFlags f;
  f.embedding_optimizer = "ftrl";
  f.embedding_learning_rate = 0.2;
  f.embedding_lr_decay_rate = 0.25;
  f.embedding_lr_decay_steps = 5000;
  f.embedding_l1 = 0.01;
  f.embedding_l2 = 0.02;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  const SparseOptimizerConfig& o = opt->plan.embedding_optimizer();
  EXPECT_EQ(o.name(), "ftrl");
  EXPECT_FLOAT_EQ(o.learning_rate(), 0.2f);
  EXPECT_FLOAT_EQ(o.decay_rate(), 0.25f);
  EXPECT_EQ(o.decay_steps(), 5000);
  EXPECT_FLOAT_EQ(o.l1_regularization_strength(), 0.01f);
  EXPECT_FLOAT_EQ(o.l2_regularization_strength(), 0.02f);
  // The dense variables' decay is its own.
  EXPECT_EQ(opt->optimizer.decay_steps(), 1000);

  // Sync: as given. Async over 4 workers: the rate scaled as the dense
  // one's, the decay counted in rounds of 4 updates.
  EXPECT_EQ(EffectiveSparseOptimizer(o, SYNC, 4, AsyncLrScaling::kSqrt).SerializeAsString(),
            o.SerializeAsString());
  SparseOptimizerConfig a = EffectiveSparseOptimizer(o, ASYNC, 4, AsyncLrScaling::kSqrt);
  EXPECT_FLOAT_EQ(a.learning_rate(), 0.1f);
  EXPECT_EQ(a.decay_steps(), 20000);
  EXPECT_FLOAT_EQ(a.l1_regularization_strength(), 0.01f);
  EXPECT_FLOAT_EQ(EffectiveSparseOptimizer(o, ASYNC, 4, AsyncLrScaling::kLinear).learning_rate(),
                  0.05f);
  EXPECT_FLOAT_EQ(EffectiveSparseOptimizer(o, ASYNC, 4, AsyncLrScaling::kNone).learning_rate(),
                  0.2f);

  // FTRL's strengths with another optimizer are refused, naming it.
  f.embedding_optimizer = "adagrad";
  EXPECT_EQ(ErrorOf(f),
            "--embedding_l1=0.01: is FTRL's; the sparse tables' optimizer is adagrad (give "
            "--embedding_optimizer=ftrl)");
}

TEST(MakeChiefOptionsTest, TheRingNeedsNoPsAndTakesItsOwnSettings) {
  ChiefFlags f;
  f.strategy = "multi_worker_mirrored";
  f.ring_codec = "bf16";
  f.ring_chunk_bytes = 4096;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(0, 3));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->plan.strategy(), MULTI_WORKER_MIRRORED);
  EXPECT_EQ(opt->plan.ring_chunk_bytes(), 4096);
  EXPECT_EQ(opt->plan.ring_codec(), WIRE_BF16);
  // --transport=auto (the default) is the data plane under parameter_server only.
  EXPECT_EQ(opt->plan.transport(), TRANSPORT_GRPC);
}

TEST(MakeChiefOptionsTest, BadValuesAreNamedWithTheirReason) {
  struct Case {
    void (*set)(ChiefFlags*);
    const char* message;
  };
  const Case cases[] = {
      {[](ChiefFlags* f) { f->epochs = 0; }, "--epochs=0: must be in [1, 100000]"},
      {[](ChiefFlags* f) { f->epochs = 100001; }, "--epochs=100001: must be in [1, 100000]"},
      {[](ChiefFlags* f) { f->batch_size = 0; }, "--batch_size=0: must be in [1, 1048576]"},
      {[](ChiefFlags* f) { f->batch_size = 1; },
       "--batch_size=1: a global batch needs at least one example for each of the 2 workers"},
      {[](ChiefFlags* f) { f->mode = "fast"; }, "--mode=fast: must be sync or async"},
      {[](ChiefFlags* f) { f->min_shard_bytes = 3; }, "--min_shard_bytes=3: must be >= 4"},
      {[](ChiefFlags* f) { f->topk_fraction = 0; }, "--topk_fraction=0.000000: must be in (0, 1]"},
      {[](ChiefFlags* f) { f->codec_min_elements = -1; }, "--codec_min_elements=-1: must be >= 0"},
      {[](ChiefFlags* f) { f->ring_codec = "int8"; },
       "--ring_codec=int8: must be fp32, bf16 or fp16"},
      {[](ChiefFlags* f) { f->ring_codec = "bf16"; },
       "--ring_codec=bf16: applies to --strategy=multi_worker_mirrored"},
      {[](ChiefFlags* f) { f->ring_chunk_bytes = 2; },
       "--ring_chunk_bytes=2: must be in [4, 268435456]"},
      {[](ChiefFlags* f) { f->optimizer = "lamb"; },
       "--optimizer=lamb: must be adam, sgd, momentum, adamw, adagrad, rmsprop or ftrl"},
      {[](ChiefFlags* f) { f->learning_rate = -1; }, "--learning_rate=-1: must be > 0"},
      {[](ChiefFlags* f) { f->optimizer = "momentum", f->momentum = 1; },
       "--momentum=1: must be in [0, 1)"},
      {[](ChiefFlags* f) { f->lr_decay_rate = 0; }, "--lr_decay_rate=0: must be in (0, 1]"},
      {[](ChiefFlags* f) { f->weight_decay = -0.5, f->given = {"weight_decay"}; },
       "--weight_decay=-0.5: must be >= 0 (every optimizer: p -= p * weight_decay * lr before "
       "its step)"},
      {[](ChiefFlags* f) { f->clipnorm = -1; }, "--clipnorm=-1: must be >= 0"},
      {[](ChiefFlags* f) { f->lr_decay_steps = -5; }, "--lr_decay_steps=-5: must be >= 0"},
      {[](ChiefFlags* f) { f->num_ps = 3; }, "--num_ps=3: TF_CONFIG lists 2 ps tasks"},
      {[](ChiefFlags* f) { f->num_workers = 1; }, "--num_workers=1: TF_CONFIG lists 2 workers"},
      {[](ChiefFlags* f) { f->replicas_to_aggregate = 3; },
       "--replicas_to_aggregate=3: must be in [0, 2] (the workers in TF_CONFIG)"},
      {[](ChiefFlags* f) { f->min_workers = 3; },
       "--min_workers=3: must be in [0, 2] (the workers in TF_CONFIG; 0: every one)"},
      {[](ChiefFlags* f) { f->min_workers = -1; },
       "--min_workers=-1: must be in [0, 2] (the workers in TF_CONFIG; 0: every one)"},
      {[](ChiefFlags* f) { f->max_staleness = -1; }, "--max_staleness=-1: must be >= 0"},
      {[](ChiefFlags* f) { f->wait_for_cluster_s = 0; }, "--wait_for_cluster_s=0: must be >= 1"},
      {[](ChiefFlags* f) { f->log_every_s = 0; }, "--log_every_s=0.000000: must be > 0"},
      {[](ChiefFlags* f) { f->heartbeat_timeout_s = 0.1; },
       "--heartbeat_timeout_s=0.100000: must be in [0.5, 3600]"},
      {[](ChiefFlags* f) { f->ps_recovery_timeout_s = 0; },
       "--ps_recovery_timeout_s=0: must be >= 1"},
      {[](ChiefFlags* f) { f->checkpoint_every_steps = -1; },
       "--checkpoint_every_steps=-1: must be >= 0"},
      {[](ChiefFlags* f) { f->checkpoint_every_secs = -1; },
       "--checkpoint_every_secs=-1.000000: must be >= 0"},
      {[](ChiefFlags* f) { f->keep_checkpoints = 0; }, "--keep_checkpoints=0: must be >= 1"},
      {[](ChiefFlags* f) { f->async_lr_scaling = "cube"; },
       "--async_lr_scaling=cube: must be sqrt, linear or none"},
      {[](ChiefFlags* f) { f->nonfinite_gradients = "ignore"; },
       "--nonfinite_gradients=ignore: must be reject or skip_step"},
  };
  for (const Case& c : cases) {
    ChiefFlags f;
    c.set(&f);
    EXPECT_EQ(ErrorOf(f), c.message);
  }
}

TEST(MakeChiefOptionsTest, ValuesThatDoNotParseAreNamedWithTheParsersReason) {
  ChiefFlags f;
  f.model = "/nonexistent/model.json";
  EXPECT_EQ(ErrorOf(f).rfind("--model=/nonexistent/model.json: ", 0), 0u) << ErrorOf(f);
  f = ChiefFlags();
  f.push_codec = "zip";
  EXPECT_EQ(ErrorOf(f).rfind("--push_codec=zip: ", 0), 0u) << ErrorOf(f);
  f = ChiefFlags();
  f.pull_codec = "zip";
  EXPECT_EQ(ErrorOf(f).rfind("--pull_codec=zip: ", 0), 0u) << ErrorOf(f);
  f = ChiefFlags();
  f.transport = "udp";
  EXPECT_EQ(ErrorOf(f), "--transport=udp: unknown transport 'udp' (auto, tcp or grpc)");
  f = ChiefFlags();
  f.strategy = "allreduce";
  EXPECT_EQ(ErrorOf(f),
            "--strategy=allreduce: strategy 'allreduce' is not one of parameter_server, "
            "multi_worker_mirrored");
}

TEST(MakeChiefOptionsTest, TheRingRefusesTheParameterServersSettings) {
  ChiefFlags ring;
  ring.strategy = "multi_worker_mirrored";
  ChiefFlags f = ring;
  f.mode = "async";
  EXPECT_EQ(ErrorOf(f), "--mode=async: multi_worker_mirrored is synchronous");
  f = ring;
  f.pull_codec = "bf16";
  EXPECT_EQ(ErrorOf(f),
            "--pull_codec=bf16: applies to --strategy=parameter_server; the ring's is "
            "--ring_codec");
  f = ring;
  f.transport = "tcp";
  EXPECT_EQ(ErrorOf(f),
            "--transport=tcp: applies to --strategy=parameter_server (the ring uses gRPC)");
  f = ring;
  f.replicas_to_aggregate = 1;
  EXPECT_EQ(ErrorOf(f),
            "--replicas_to_aggregate=1: multi_worker_mirrored sums every worker's gradient (no "
            "backup workers)");
  f = ring;
  f.min_workers = 1;
  EXPECT_EQ(ErrorOf(f),
            "--min_workers=1: multi_worker_mirrored's ring needs every worker from the start");
}

TEST(MakeChiefOptionsTest, PsReplicasNeedAnotherPsForEachBackup) {
  ChiefFlags f;
  f.ps_replicas = 4;
  EXPECT_EQ(ErrorOf(f, Cluster(8, 2)),
            "--ps_replicas=4: must be in [0, 3] (backups per ps, each on another ps)");
  f.ps_replicas = -1;
  EXPECT_EQ(ErrorOf(f),
            "--ps_replicas=-1: must be in [0, 3] (backups per ps, each on another ps)");
  f.ps_replicas = 2;
  EXPECT_EQ(ErrorOf(f, Cluster(2, 2)),
            "--ps_replicas=2: each backup goes on another ps, and TF_CONFIG lists 2 ps: at most 1");
  f.ps_replicas = 1;
  EXPECT_EQ(ErrorOf(f, Cluster(1, 2)),
            "--ps_replicas=1: each backup goes on another ps, and TF_CONFIG lists 1 ps: at most 0");
  f.strategy = "multi_worker_mirrored";
  EXPECT_EQ(ErrorOf(f),
            "--ps_replicas=1: applies to --strategy=parameter_server (the ring keeps no ps)");
  ChiefFlags good;
  good.ps_replicas = 1;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(good, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->ps_replicas, 1);
  good.ps_replicas = 2;
  opt = MakeChiefOptions(good, Cluster(3, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->ps_replicas, 2);
}

TEST(MakeChiefOptionsTest, ParameterServersNeedPsTasks) {
  EXPECT_EQ(ErrorOf(ChiefFlags(), Cluster(0, 2)),
            "TF_CONFIG lists no ps tasks: --strategy=parameter_server needs at least one (or use "
            "--strategy=multi_worker_mirrored)");
}

TEST(MakeChiefOptionsTest, AClusterWithoutWorkersIsRefused) {
  EXPECT_EQ(ErrorOf(ChiefFlags(), Cluster(1, 0)),
            "TF_CONFIG: cluster.worker is empty; nothing would train");
}

TEST(MakeChiefOptionsTest, TheFirstBadValueInCheckOrderIsTheOneNamed) {
  ChiefFlags f;
  f.keep_checkpoints = 0;
  f.epochs = 0;
  f.optimizer = "lamb";
  EXPECT_EQ(ErrorOf(f), "--epochs=0: must be in [1, 100000]");
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(MakeChiefOptionsTest, ExportedWeightsAreTheInitialParametersOfTheNextRun) {
  absl::StatusOr<ModelSpec> mlp = ModelByName("mlp");
  ASSERT_TRUE(mlp.ok());
  const std::vector<float> trained = InitialParameters(*mlp, 3);
  const std::string path = TempPath("mlp.safetensors");
  ASSERT_TRUE(ExportWeights(path, *mlp, trained, 10, 1, 0.9).ok());
  ChiefFlags f;
  f.model = "mlp";
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_TRUE(opt->initial_parameters.empty());  // by default: the initializers
  f.initial_weights = path;
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->initial_weights, path);
  EXPECT_EQ(opt->initial_parameters, trained);
  // The mlp's weights do not fit the cnn: exit 2 naming them.
  f.model = "cnn";
  const std::string error = ErrorOf(f);
  EXPECT_EQ(error.rfind("--initial_weights=" + path + ": 7 mismatches with model 'cnn': ", 0),
            0u)
      << error;
  EXPECT_NE(error.find("variable 'conv1/kernel' [3, 3, 1, 32] is absent from the file"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("variable 'dense1/kernel' has shape [1600, 64] in the model but "
                       "[784, 32] in the file (tensor 'dense1/kernel')"),
            std::string::npos)
      << error;
  f.initial_weights = "/nonexistent/w.safetensors";
  EXPECT_EQ(ErrorOf(f).rfind("--initial_weights=/nonexistent/w.safetensors: ", 0), 0u);
}

TEST(MakeChiefOptionsTest, InitialWeightsArchiveTakesTheModelArchivesOwn) {
  ChiefFlags f;
  f.model = "tests/fixtures/keras/keras3_small_trained.keras";
  f.initial_weights = "archive";
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->initial_weights, f.model);
  ASSERT_EQ(opt->initial_parameters.size(), 3690u);
  EXPECT_EQ(opt->initial_parameters[0], 1.0f);  // conv_a/kernel[0]
  EXPECT_EQ(opt->initial_parameters.back(), static_cast<float>(12 + 9 / 4096.0));  // out/bias[9]
  // Without --initial_weights the archive's weights are not used, and the
  // chief says so.
  f.initial_weights = "";
  std::vector<std::string> warnings;
  opt = MakeChiefOptions(f, Cluster(2, 2), &warnings);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_TRUE(opt->initial_parameters.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "--model=" + f.model +
                             " holds weights (model.weights.h5); the run starts from the "
                             "model's initializers, not from them (--initial_weights=archive "
                             "would)");
  warnings.clear();
  f.model = "tests/fixtures/keras/keras3_cnn.keras";  // no weights in it
  ASSERT_TRUE(MakeChiefOptions(f, Cluster(2, 2), &warnings).ok());
  EXPECT_TRUE(warnings.empty());
  f.initial_weights = "archive";
  f.model = "mlp";
  EXPECT_EQ(ErrorOf(f),
            "--initial_weights=archive: takes the --model archive's weights, but --model=mlp is "
            "not a .keras archive");
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

TEST(ChiefOptimizerTest, EachOptimizerWithKerassDefaultsAndTheFlagsGiven) {
  ChiefFlags f;
  f.optimizer = "adamw";
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->optimizer.name(), "adamw");
  EXPECT_FLOAT_EQ(opt->optimizer.weight_decay(), 0.004f);  // Keras's AdamW default
  EXPECT_EQ(opt->optimizer_origin, "--optimizer");
  f.weight_decay = 0.01;
  f.given = {"optimizer", "weight_decay"};
  EXPECT_FLOAT_EQ(MakeChiefOptions(f, Cluster(2, 2))->optimizer.weight_decay(), 0.01f);
  f.optimizer = "rmsprop";
  f.given = {"optimizer"};
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FLOAT_EQ(opt->optimizer.momentum(), 0.0f);  // Keras's, not --momentum's default
  EXPECT_FLOAT_EQ(opt->optimizer.rho(), 0.9f);
  EXPECT_FLOAT_EQ(opt->optimizer.weight_decay(), 0.01f);  // given, whatever the optimizer
  f.given = {"optimizer", "momentum"};
  EXPECT_FLOAT_EQ(MakeChiefOptions(f, Cluster(2, 2))->optimizer.momentum(), 0.9f);
  f = ChiefFlags();
  f.optimizer = "ftrl";
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FLOAT_EQ(opt->optimizer.learning_rate_power(), -0.5f);
  EXPECT_FLOAT_EQ(opt->optimizer.initial_accumulator_value(), 0.1f);
  EXPECT_EQ(DescribeOptimizer(opt->optimizer),
            "ftrl, learning_rate 0.002 x 0.5 every 1000 updates, learning_rate_power -0.5, "
            "initial_accumulator_value 0.1, l1 0, l2 0, l2_shrinkage 0, beta 0");
  f.optimizer = "adagrad";
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->optimizer.name(), "adagrad");
}

TEST(ChiefOptimizerTest, TheModelFilesCompiledOptimizerUnlessTheFlagsSayOtherwise) {
  ChiefFlags f;
  f.model = "tests/fixtures/optimizers/tfjs_rmsprop.json";
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->optimizer_origin, "the model file's compiled RMSProp");
  EXPECT_EQ(DescribeOptimizer(opt->optimizer),
            "rmsprop, learning_rate 0.003, rho 0.95, momentum 0.5, epsilon 1e-06, centered");
  // The file has no schedule: the rate is constant, not --lr_decay_*'s defaults.
  EXPECT_EQ(opt->optimizer.decay_steps(), 0);
  // Each optimizer flag given takes its value's place.
  f.learning_rate = 0.01;
  f.lr_decay_steps = 300;
  f.given = {"learning_rate", "lr_decay_steps"};
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->optimizer.name(), "rmsprop");
  EXPECT_FLOAT_EQ(opt->optimizer.learning_rate(), 0.01f);
  EXPECT_EQ(opt->optimizer.decay_steps(), 300);
  EXPECT_FLOAT_EQ(opt->optimizer.decay_rate(), 0.5f);  // --lr_decay_rate's default
  EXPECT_FLOAT_EQ(opt->optimizer.rho(), 0.95f);
  // --optimizer given: the flags alone.
  f.given = {"optimizer"};
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->optimizer.name(), "adam");
  EXPECT_EQ(opt->optimizer_origin, "--optimizer");
  // A file's momentum out of range is named as the flag that sets it.
  f = ChiefFlags();
  f.model = "tests/fixtures/optimizers/tfjs_momentum.json";
  f.momentum = 1.5;
  f.given = {"momentum"};
  EXPECT_EQ(ErrorOf(f), "--momentum=1.5: must be in [0, 1)");
}

TEST(ChiefOptimizerTest, ClippingInEveryModeButWithSparseTables) {
  ChiefFlags f;
  f.global_clipnorm = 1.0;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(f, Cluster(2, 2));  // sync: on the ps
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FLOAT_EQ(opt->plan.global_clipnorm(), 1.0f);
  f.mode = "async";
  opt = MakeChiefOptions(f, Cluster(2, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FLOAT_EQ(opt->plan.global_clipnorm(), 1.0f);
  EXPECT_FLOAT_EQ(opt->plan.clipnorm(), 0.0f);
  f.clipnorm = 2.0;
  EXPECT_EQ(ErrorOf(f), "--clipnorm=2: and --global_clipnorm are both set (Keras takes one or the "
                        "other)");
  f = ChiefFlags();
  f.clipnorm = 0.5;
  f.strategy = "multi_worker_mirrored";
  opt = MakeChiefOptions(f, Cluster(0, 2));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FLOAT_EQ(opt->plan.clipnorm(), 0.5f);
  // A sparse table's rows travel apart from the gradient.
  f = ChiefFlags();
  f.clipnorm = 0.5;
  f.model = "deploy/models/ctr_wide_deep.json";
  EXPECT_EQ(ErrorOf(f).substr(0, 79),
            "--clipnorm=0.5: is not followed with sparse embedding tables (their rows travel");
}

}  // namespace
}  // namespace pscluster
