#include "chief/chief_flags.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chief/strategy.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "model/initial_weights.h"
#include "model/keras_optimizer.h"
#include "model/keras_weights.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "model/sparse_layout.h"
#include "update/optimizer.h"
#include "update/store_state.h"
#include "wire/codec.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace {

absl::Status Bad(const std::string& flag, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", want));
}

// --model, --epochs, --batch_size (its range), --mode, --seed,
// --min_shard_bytes.
absl::Status SetModelAndData(const ChiefFlags& f, TrainingPlan* plan) {
  absl::StatusOr<std::string> model_json = ReadModelFile(f.model);
  absl::StatusOr<ModelSpec> model_spec =
      model_json.ok() ? ParseKerasModel(*model_json, f.model, f.loss) : model_json.status();
  if (!model_spec.ok()) {
    return !f.loss.empty() && absl::StartsWith(model_spec.status().message(), "--loss=")
               ? absl::InvalidArgumentError(model_spec.status().message())
               : Bad("model", f.model, std::string(model_spec.status().message()));
  }
  plan->set_model(f.model);
  plan->set_model_json(*model_json);
  plan->set_loss(f.loss);
  if (f.epochs < 1 || f.epochs > 100000) {
    return Bad("epochs", std::to_string(f.epochs), "must be in [1, 100000]");
  }
  plan->set_epochs(f.epochs);
  if (f.batch_size < 1 || f.batch_size > 1 << 20) {
    return Bad("batch_size", std::to_string(f.batch_size), "must be in [1, 1048576]");
  }
  if (f.mode == "sync") {
    plan->set_mode(SYNC);
  } else if (f.mode == "async") {
    plan->set_mode(ASYNC);
  } else {
    return Bad("mode", f.mode, "must be sync or async");
  }
  plan->set_seed(f.seed);
  if (f.min_shard_bytes < 4) {
    return Bad("min_shard_bytes", std::to_string(f.min_shard_bytes), "must be >= 4");
  }
  plan->set_min_shard_bytes(f.min_shard_bytes);
  plan->set_report_interval_s(1.0f);
  return absl::OkStatus();
}

// Under multi_worker_mirrored, the parameter servers' wire and update
// settings have no meaning: refused rather than silently ignored.
absl::Status CheckRingOnly(const ChiefFlags& f, Codec push, Codec pull, Transport transport) {
  if (f.mode != "sync") return Bad("mode", f.mode, "multi_worker_mirrored is synchronous");
  if (push != Codec::kFloat32 || pull != Codec::kFloat32) {
    const bool bad_push = push != Codec::kFloat32;
    return Bad(bad_push ? "push_codec" : "pull_codec", bad_push ? f.push_codec : f.pull_codec,
               "applies to --strategy=parameter_server; the ring's is --ring_codec");
  }
  if (transport != TRANSPORT_GRPC) {
    return Bad("transport", f.transport,
               "applies to --strategy=parameter_server (the ring uses gRPC)");
  }
  return absl::OkStatus();
}

// The wire: --push_codec, --pull_codec, --topk_fraction,
// --codec_min_elements, --transport and its overlap, --strategy and the
// ring's --ring_codec and --ring_chunk_bytes.
absl::Status SetWire(const ChiefFlags& f, TrainingPlan* plan) {
  const absl::StatusOr<Codec> push = ParseCodec(f.push_codec);
  if (!push.ok()) return Bad("push_codec", f.push_codec, std::string(push.status().message()));
  const absl::StatusOr<Codec> pull = ParseCodec(f.pull_codec);
  if (!pull.ok()) return Bad("pull_codec", f.pull_codec, std::string(pull.status().message()));
  if (!(f.topk_fraction > 0.0 && f.topk_fraction <= 1.0)) {
    return Bad("topk_fraction", std::to_string(f.topk_fraction), "must be in (0, 1]");
  }
  if (f.codec_min_elements < 0) {
    return Bad("codec_min_elements", std::to_string(f.codec_min_elements), "must be >= 0");
  }
  plan->set_push_codec(CodecToProto(*push));
  plan->set_pull_codec(CodecToProto(*pull));
  plan->set_topk_fraction(f.topk_fraction);
  plan->set_codec_min_elements(f.codec_min_elements);
  const absl::StatusOr<Strategy> strategy = ParseStrategy(f.strategy);
  if (!strategy.ok()) return Bad("strategy", f.strategy, std::string(strategy.status().message()));
  plan->set_strategy(*strategy);
  // auto (the default): the tcp data plane, which the ring does not use.
  const absl::StatusOr<Transport> transport =
      f.transport == "auto"
          ? (*strategy == MULTI_WORKER_MIRRORED ? TRANSPORT_GRPC : TRANSPORT_TCP)
          : ParseTransport(f.transport);
  if (!transport.ok()) {
    return Bad("transport", f.transport,
               absl::StrCat("unknown transport '", f.transport, "' (auto, tcp or grpc)"));
  }
  plan->set_transport(*transport);
  plan->set_push_overlap(f.push_overlap);
  plan->set_priority_pull(f.priority_pull);
  const absl::StatusOr<Codec> ring = ParseCodec(f.ring_codec);
  if (!ring.ok() ||
      (*ring != Codec::kFloat32 && *ring != Codec::kBfloat16 && *ring != Codec::kFloat16)) {
    return Bad("ring_codec", f.ring_codec, "must be fp32, bf16 or fp16");
  }
  if (f.ring_chunk_bytes < 4 || f.ring_chunk_bytes > (256 << 20)) {
    return Bad("ring_chunk_bytes", std::to_string(f.ring_chunk_bytes), "must be in [4, 268435456]");
  }
  if (*strategy == MULTI_WORKER_MIRRORED) {
    PSCLUSTER_RETURN_IF_ERROR(CheckRingOnly(f, *push, *pull, *transport));
    plan->set_ring_codec(CodecToProto(*ring));
    plan->set_ring_chunk_bytes(f.ring_chunk_bytes);
  } else if (*ring != Codec::kFloat32) {
    return Bad("ring_codec", f.ring_codec, "applies to --strategy=multi_worker_mirrored");
  }
  return absl::OkStatus();
}

// --dense_embeddings and the sparse tables' --embedding_* flags: checked
// whatever the model, so that a bad value is named even for a model
// without Embedding layers; a model whose Embedding cannot be sparse, and
// a codec the sparse rows cannot take, are refused.
absl::Status SetEmbeddings(const ChiefFlags& f, const OptimizerConfig& dense_optimizer,
                           TrainingPlan* plan) {
  // A ring of mirrored workers holds whole models: its tables are dense.
  const bool dense = f.dense_embeddings || plan->strategy() == MULTI_WORKER_MIRRORED;
  plan->set_dense_embeddings(dense);
  // By default the dense optimizer's per-row form, where it has one
  // (momentum, adamw and rmsprop have none: refused below only if the
  // model has tables).
  const bool per_row = [](const std::string& n) {
    return n == "sgd" || n == "adagrad" || n == "adam" || n == "ftrl";
  }(f.embedding_optimizer.empty() ? dense_optimizer.name() : f.embedding_optimizer);
  const std::string name =
      f.embedding_optimizer.empty() ? dense_optimizer.name() : f.embedding_optimizer;
  if (!f.embedding_optimizer.empty() && !per_row) {
    return Bad("embedding_optimizer", f.embedding_optimizer, "must be sgd, adagrad, adam or ftrl");
  }
  const double lr = f.embedding_learning_rate > 0 ? f.embedding_learning_rate : f.learning_rate;
  if (!(f.embedding_learning_rate >= 0 && lr > 0 && lr < 1e6)) {
    return Bad("embedding_learning_rate", absl::StrCat(f.embedding_learning_rate),
               "must be > 0 (0: --learning_rate)");
  }
  if (f.embedding_admit_after < 1 || f.embedding_admit_after > 1000000) {
    return Bad("embedding_admit_after", std::to_string(f.embedding_admit_after),
               "must be in [1, 1000000]");
  }
  if (!(f.embedding_initial_accumulator >= 0 && f.embedding_initial_accumulator <= 1e6)) {
    return Bad("embedding_initial_accumulator", absl::StrCat(f.embedding_initial_accumulator),
               "must be in [0, 1e6]");
  }
  if (f.embedding_evict_after < 0) {
    return Bad("embedding_evict_after", std::to_string(f.embedding_evict_after), "must be >= 0");
  }
  if (!(f.embedding_lr_decay_rate > 0 && f.embedding_lr_decay_rate <= 1)) {
    return Bad("embedding_lr_decay_rate", absl::StrCat(f.embedding_lr_decay_rate),
               "must be in (0, 1]");
  }
  if (f.embedding_lr_decay_steps < 0) {
    return Bad("embedding_lr_decay_steps", std::to_string(f.embedding_lr_decay_steps),
               "must be >= 0");
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"embedding_l1", f.embedding_l1},
        std::pair<const char*, double>{"embedding_l2", f.embedding_l2}}) {
    if (!(value >= 0 && value <= 1e6)) {
      return Bad(flag, absl::StrCat(value), "must be in [0, 1e6]");
    }
    if (value > 0 && name != "ftrl") {
      return Bad(flag, absl::StrCat(value),
                 absl::StrCat("is FTRL's; the sparse tables' optimizer is ", name,
                              " (give --embedding_optimizer=ftrl)"));
    }
  }
  SparseOptimizerConfig* o = plan->mutable_embedding_optimizer();
  o->set_name(name);
  o->set_learning_rate(static_cast<float>(lr));
  o->set_epsilon(1e-7f);
  o->set_initial_accumulator_value(static_cast<float>(f.embedding_initial_accumulator));
  o->set_beta1(0.9f);
  o->set_beta2(0.999f);
  o->set_learning_rate_power(-0.5f);
  o->set_l1_regularization_strength(static_cast<float>(f.embedding_l1));
  o->set_l2_regularization_strength(static_cast<float>(f.embedding_l2));
  o->set_decay_rate(static_cast<float>(f.embedding_lr_decay_rate));
  o->set_decay_steps(f.embedding_lr_decay_steps);
  plan->set_embedding_admit_after(f.embedding_admit_after);
  plan->set_embedding_evict_after(f.embedding_evict_after);
  if (dense) {
    if (f.embedding_unbounded) {
      return Bad("embedding_unbounded", "true",
                 f.dense_embeddings ? "needs sparse tables, but --dense_embeddings sends them whole"
                                    : "needs sparse tables; multi_worker_mirrored keeps them whole");
    }
    return absl::OkStatus();
  }
  plan->set_embedding_unbounded(f.embedding_unbounded);
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan->model(), plan->model_json(), plan->loss());
  if (!spec.ok()) return Bad("model", f.model, std::string(spec.status().message()));
  absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(*spec);
  if (!tables.ok()) return Bad("model", f.model, std::string(tables.status().message()));
  if (tables->empty()) {
    if (f.embedding_unbounded) {
      return Bad("embedding_unbounded", "true",
                 absl::StrCat("--model=", f.model, " has no Embedding layer to make unbounded"));
    }
    return absl::OkStatus();
  }
  if (!per_row) {
    return Bad("optimizer", name,
               "has no per-row form for the model's sparse embedding tables: give "
               "--embedding_optimizer (sgd, adagrad, adam or ftrl) or --dense_embeddings");
  }
  if (plan->push_codec() != WIRE_FP32 || plan->pull_codec() != WIRE_FP32) {
    const bool push = plan->push_codec() != WIRE_FP32;
    return Bad(push ? "push_codec" : "pull_codec", push ? f.push_codec : f.pull_codec,
               "the model's sparse embedding rows travel as float32 only: give fp32, or "
               "--dense_embeddings to send the tables whole");
  }
  return absl::OkStatus();
}

// A compiled optimizer's options in our terms (its clipping aside).
OptimizerConfig ToConfig(const CompiledOptimizer& c) {
  OptimizerConfig o;
  o.set_name(c.name);
  o.set_learning_rate(static_cast<float>(c.learning_rate));
  o.set_momentum(static_cast<float>(c.momentum));
  o.set_beta1(static_cast<float>(c.beta1));
  o.set_beta2(static_cast<float>(c.beta2));
  o.set_epsilon(static_cast<float>(c.epsilon));
  o.set_weight_decay(static_cast<float>(c.weight_decay));
  o.set_rho(static_cast<float>(c.rho));
  o.set_centered(c.centered);
  o.set_initial_accumulator_value(static_cast<float>(c.initial_accumulator_value));
  o.set_learning_rate_power(static_cast<float>(c.learning_rate_power));
  o.set_l1(static_cast<float>(c.l1));
  o.set_l2(static_cast<float>(c.l2));
  o.set_l2_shrinkage(static_cast<float>(c.l2_shrinkage));
  o.set_beta(static_cast<float>(c.beta));
  o.set_decay_rate(static_cast<float>(c.decay_rate));
  o.set_decay_steps(c.decay_steps);
  return o;
}

// The optimizer: --optimizer and its flags; or, where --optimizer is not
// given and the model file was compiled with an optimizer, the file's,
// with each of --learning_rate, --momentum, --weight_decay,
// --lr_decay_rate, --lr_decay_steps, --clipnorm and --global_clipnorm that
// is given in its place. The result is checked whatever its source, each
// bad value named as the flag that sets it.
absl::Status SetOptimizer(const ChiefFlags& f, TrainingPlan* plan, OptimizerConfig* o,
                          std::string* origin) {
  auto given = [&f](const char* flag) { return f.given.count(flag) > 0; };
  double clipnorm = f.clipnorm, global_clipnorm = f.global_clipnorm;
  std::optional<CompiledOptimizer> compiled;
  if (!given("optimizer")) {
    absl::StatusOr<std::optional<CompiledOptimizer>> read =
        ReadCompiledOptimizer(plan->model_json(), f.model);
    if (!read.ok()) return Bad("model", f.model, std::string(read.status().message()));
    compiled = *std::move(read);
  }
  if (compiled.has_value()) {
    *o = ToConfig(*compiled);
    clipnorm = compiled->clipnorm;
    global_clipnorm = compiled->global_clipnorm;
    *origin = absl::StrCat("the model file's compiled ", compiled->keras_class);
    if (given("learning_rate")) o->set_learning_rate(static_cast<float>(f.learning_rate));
    if (given("momentum")) o->set_momentum(static_cast<float>(f.momentum));
    if (given("lr_decay_rate")) o->set_decay_rate(static_cast<float>(f.lr_decay_rate));
    if (given("lr_decay_steps")) o->set_decay_steps(f.lr_decay_steps);
    if (given("clipnorm")) clipnorm = f.clipnorm;
    if (given("global_clipnorm")) global_clipnorm = f.global_clipnorm;
    if (o->decay_steps() > 0 && !given("lr_decay_rate") && o->decay_rate() == 1.0f) {
      o->set_decay_rate(static_cast<float>(f.lr_decay_rate));
    }
  } else {
    static const char* const kNames[] = {"adam",    "sgd",     "momentum", "adamw",
                                         "adagrad", "rmsprop", "ftrl"};
    if (std::find(std::begin(kNames), std::end(kNames), f.optimizer) == std::end(kNames)) {
      return Bad("optimizer", f.optimizer,
                 "must be adam, sgd, momentum, adamw, adagrad, rmsprop or ftrl");
    }
    *o = ToConfig(KerasOptimizerDefaults(f.optimizer));
    *origin = "--optimizer";
    o->set_learning_rate(static_cast<float>(f.learning_rate));
    if (f.optimizer == "momentum" || (f.optimizer == "rmsprop" && given("momentum"))) {
      o->set_momentum(static_cast<float>(f.momentum));
    }
    o->set_decay_rate(static_cast<float>(f.lr_decay_rate));
    o->set_decay_steps(f.lr_decay_steps);
  }
  if (given("weight_decay") || (!compiled.has_value() && f.weight_decay >= 0)) {
    o->set_weight_decay(static_cast<float>(f.weight_decay));
  }
  const double lr = o->learning_rate();
  if (!(lr > 0 && lr < 1e6)) return Bad("learning_rate", absl::StrCat(lr), "must be > 0");
  if (!(o->momentum() >= 0 && o->momentum() < 1)) {
    return Bad("momentum", absl::StrCat(o->momentum()), "must be in [0, 1)");
  }
  if (!(o->decay_rate() > 0 && o->decay_rate() <= 1)) {
    return Bad("lr_decay_rate", absl::StrCat(o->decay_rate()), "must be in (0, 1]");
  }
  if (o->decay_steps() < 0) {
    return Bad("lr_decay_steps", std::to_string(o->decay_steps()), "must be >= 0");
  }
  if (!(o->weight_decay() >= 0 && o->weight_decay() < 1e6)) {
    return Bad("weight_decay", absl::StrCat(o->weight_decay()),
               "must be >= 0 (every optimizer: p -= p * weight_decay * lr before its step)");
  }
  for (const auto& [flag, value] : {std::pair<const char*, double>{"clipnorm", clipnorm},
                                    std::pair<const char*, double>{"global_clipnorm",
                                                                   global_clipnorm}}) {
    if (!(value >= 0 && value < 1e30)) return Bad(flag, absl::StrCat(value), "must be >= 0");
  }
  if (clipnorm > 0 && global_clipnorm > 0) {
    return Bad("clipnorm", absl::StrCat(clipnorm),
               "and --global_clipnorm are both set (Keras takes one or the other)");
  }
  plan->set_clipnorm(static_cast<float>(clipnorm));
  plan->set_global_clipnorm(static_cast<float>(global_clipnorm));
  // What the optimizer's constructor checks on the ps, checked here first
  // so that a bad file value is named at start-up.
  const OptimizerOptions check = OptimizerFromConfig(*o);
  if (absl::StatusOr<std::unique_ptr<Optimizer>> made = Optimizer::Create(check, 0); !made.ok()) {
    return compiled.has_value()
               ? Bad("model", f.model, std::string(made.status().message()))
               : Bad("optimizer", f.optimizer, std::string(made.status().message()));
  }
  return absl::OkStatus();
}

// What depends on the cluster: --num_ps and --num_workers checked against
// it, the global batch split over the workers, the ps a strategy needs,
// --replicas_to_aggregate.
absl::Status SetCluster(const ChiefFlags& f, const TfConfig& config, ChiefOptions* opt,
                        std::vector<std::string>* warnings) {
  const int num_workers = config.cluster.num_tasks(kWorkerJob);
  const int num_ps = config.cluster.num_tasks(kPsJob);
  if (f.num_ps != 0 && f.num_ps != num_ps) {
    return Bad("num_ps", std::to_string(f.num_ps),
               absl::StrCat(config.source, " lists ", num_ps, " ps tasks"));
  }
  if (f.num_workers != 0 && f.num_workers != num_workers) {
    return Bad("num_workers", std::to_string(f.num_workers),
               absl::StrCat(config.source, " lists ", num_workers, " workers"));
  }
  if (num_workers < 1) {
    // The chief's own check, made here before the batch is split over none.
    return absl::InvalidArgumentError(
        absl::StrCat(config.source, ": cluster.worker is empty; nothing would train"));
  }
  const int batch = f.batch_size;
  if (batch < num_workers) {
    return Bad("batch_size", std::to_string(batch),
               absl::StrCat("a global batch needs at least one example for each of the ",
                            num_workers, " workers"));
  }
  // Each worker takes an equal share; a remainder is dropped (and said).
  opt->plan.set_batch_size(batch / num_workers);
  if (batch % num_workers != 0 && warnings != nullptr) {
    warnings->push_back(absl::StrFormat(
        "--batch_size=%d is not a multiple of %d workers: %d per worker, %d per step", batch,
        num_workers, batch / num_workers, batch / num_workers * num_workers));
  }
  const bool mirrored = opt->plan.strategy() == MULTI_WORKER_MIRRORED;
  const int replicas = f.replicas_to_aggregate;
  if (mirrored && replicas != 0 && replicas != num_workers) {
    return Bad("replicas_to_aggregate", std::to_string(replicas),
               "multi_worker_mirrored sums every worker's gradient (no backup workers)");
  }
  if (!mirrored && num_ps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source, " lists no ps tasks: --strategy=", StrategyName(PARAMETER_SERVER),
        " needs at least one (or use --strategy=", StrategyName(MULTI_WORKER_MIRRORED), ")"));
  }
  if (replicas < 0 || replicas > num_workers) {
    return Bad(
        "replicas_to_aggregate", std::to_string(replicas),
        absl::StrCat("must be in [0, ", num_workers, "] (the workers in ", config.source, ")"));
  }
  opt->replicas_to_aggregate = replicas;
  if (f.min_workers < 0 || f.min_workers > num_workers) {
    return Bad("min_workers", std::to_string(f.min_workers),
               absl::StrCat("must be in [0, ", num_workers, "] (the workers in ", config.source,
                            "; 0: every one)"));
  }
  if (mirrored && f.min_workers != 0 && f.min_workers != num_workers) {
    return Bad("min_workers", std::to_string(f.min_workers),
               "multi_worker_mirrored's ring needs every worker from the start");
  }
  opt->min_workers = f.min_workers;
  if (f.ps_replicas < 0 || f.ps_replicas > kMaxPsReplicas) {
    return Bad("ps_replicas", std::to_string(f.ps_replicas),
               absl::StrCat("must be in [0, ", kMaxPsReplicas,
                            "] (backups per ps, each on another ps)"));
  }
  if (f.ps_replicas > 0 && mirrored) {
    return Bad("ps_replicas", std::to_string(f.ps_replicas),
               "applies to --strategy=parameter_server (the ring keeps no ps)");
  }
  if (f.ps_replicas > 0 && f.ps_replicas > num_ps - 1) {
    return Bad("ps_replicas", std::to_string(f.ps_replicas),
               absl::StrCat("each backup goes on another ps, and ", config.source, " lists ",
                            num_ps, " ps: at most ", std::max(num_ps - 1, 0)));
  }
  opt->ps_replicas = f.ps_replicas;
  if (f.min_ps < 0 || f.min_ps > num_ps) {
    return Bad("min_ps", std::to_string(f.min_ps),
               absl::StrCat("must be in [0, ", num_ps, "] (the ps in ", config.source,
                            "; 0: every one, a fixed set)"));
  }
  if (f.min_ps > 0 && mirrored) {
    return Bad("min_ps", std::to_string(f.min_ps),
               "applies to --strategy=parameter_server (the ring keeps no ps)");
  }
  if (f.min_ps > 0 && f.ps_replicas > 0) {
    return Bad("min_ps", std::to_string(f.min_ps),
               absl::StrCat("adding and draining ps does not move backups yet: run with "
                            "--ps_replicas=0, or without --min_ps (--ps_replicas=",
                            f.ps_replicas, ")"));
  }
  opt->min_ps = f.min_ps;
  return absl::OkStatus();
}

// --max_staleness, --wait_for_cluster_s, --log_every_s,
// --heartbeat_timeout_s, --ps_recovery_timeout_s.
absl::Status SetTimings(const ChiefFlags& f, ChiefOptions* opt) {
  if (f.max_staleness < 0) {
    return Bad("max_staleness", std::to_string(f.max_staleness), "must be >= 0");
  }
  opt->max_staleness = f.max_staleness;
  if (f.wait_for_cluster_s < 1) {
    return Bad("wait_for_cluster_s", std::to_string(f.wait_for_cluster_s), "must be >= 1");
  }
  opt->wait_for_cluster = absl::Seconds(f.wait_for_cluster_s);
  if (!(f.log_every_s > 0)) return Bad("log_every_s", std::to_string(f.log_every_s), "must be > 0");
  opt->log_every = absl::Seconds(f.log_every_s);
  const double heartbeat = f.heartbeat_timeout_s;
  if (!(heartbeat >= 0.5 && heartbeat <= 3600)) {
    return Bad("heartbeat_timeout_s", std::to_string(heartbeat), "must be in [0.5, 3600]");
  }
  opt->heartbeat_timeout = absl::Seconds(heartbeat);
  opt->heartbeat_interval = std::min(absl::Milliseconds(500), opt->heartbeat_timeout / 4);
  if (f.ps_recovery_timeout_s < 1) {
    return Bad("ps_recovery_timeout_s", std::to_string(f.ps_recovery_timeout_s), "must be >= 1");
  }
  opt->ps_recovery_timeout = absl::Seconds(f.ps_recovery_timeout_s);
  return absl::OkStatus();
}

// --checkpoint_every_steps, --checkpoint_every_secs, --keep_checkpoints,
// --async_lr_scaling, --nonfinite_gradients.
absl::Status SetCheckpointsAndPolicies(const ChiefFlags& f, ChiefOptions* opt) {
  if (f.checkpoint_every_steps < 0) {
    return Bad("checkpoint_every_steps", std::to_string(f.checkpoint_every_steps), "must be >= 0");
  }
  opt->checkpoint_every_steps = f.checkpoint_every_steps;
  if (!(f.checkpoint_every_secs >= 0)) {
    return Bad("checkpoint_every_secs", std::to_string(f.checkpoint_every_secs), "must be >= 0");
  }
  opt->checkpoint_every = absl::Seconds(f.checkpoint_every_secs);
  if (f.keep_checkpoints < 1) {
    return Bad("keep_checkpoints", std::to_string(f.keep_checkpoints), "must be >= 1");
  }
  opt->keep_checkpoints = f.keep_checkpoints;
  opt->embedding_rows_ahead = f.embedding_rows_ahead;
  if (f.async_lr_scaling == "sqrt") {
    opt->async_lr_scaling = AsyncLrScaling::kSqrt;
  } else if (f.async_lr_scaling == "linear") {
    opt->async_lr_scaling = AsyncLrScaling::kLinear;
  } else if (f.async_lr_scaling == "none") {
    opt->async_lr_scaling = AsyncLrScaling::kNone;
  } else {
    return Bad("async_lr_scaling", f.async_lr_scaling, "must be sqrt, linear or none");
  }
  if (f.nonfinite_gradients == "reject") {
    opt->nonfinite = NONFINITE_REJECT;
  } else if (f.nonfinite_gradients == "skip_step") {
    opt->nonfinite = NONFINITE_SKIP_STEP;
  } else {
    return Bad("nonfinite_gradients", f.nonfinite_gradients, "must be reject or skip_step");
  }
  return absl::OkStatus();
}

// --logdir, and the paths that default to places under it.
void SetPaths(const ChiefFlags& f, ChiefOptions* opt) {
  opt->logdir = f.logdir;
  opt->export_path = f.export_path;
  if (opt->export_path.empty() && !opt->logdir.empty()) {
    opt->export_path = opt->logdir + "/model.safetensors";
  }
  opt->checkpoint_dir = f.checkpoint_dir;
  if (opt->checkpoint_dir.empty() && !opt->logdir.empty()) {
    opt->checkpoint_dir = opt->logdir + "/checkpoints";
  }
  opt->data_dir = f.data_dir;
}

// --initial_weights: read and checked against the plan's model. Without
// it, a --model archive's own weights are not used (and that is said).
absl::Status SetInitialWeights(const ChiefFlags& f, ChiefOptions* opt,
                               std::vector<std::string>* warnings) {
  if (f.initial_weights.empty()) {
    if (warnings != nullptr && absl::EndsWith(f.model, ".keras") &&
        KerasArchiveHasWeights(f.model).value_or(false)) {
      warnings->push_back(absl::StrCat(
          "--model=", f.model,
          " holds weights (model.weights.h5); the run starts from the model's initializers, "
          "not from them (--initial_weights=archive would)"));
    }
    return absl::OkStatus();
  }
  std::string path = f.initial_weights;
  if (path == "archive") {
    if (!absl::EndsWith(f.model, ".keras")) {
      return Bad("initial_weights", path,
                 absl::StrCat("takes the --model archive's weights, but --model=", f.model,
                              " is not a .keras archive"));
    }
    path = f.model;
  }
  absl::StatusOr<ModelSpec> spec =
      PlanModelSpec(opt->plan.model(), opt->plan.model_json(), opt->plan.loss());
  if (!spec.ok()) return Bad("model", f.model, std::string(spec.status().message()));
  if (!opt->plan.dense_embeddings()) {
    absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(*spec);
    if (tables.ok() && !tables->empty()) {
      return Bad("initial_weights", f.initial_weights,
                 absl::StrCat("the model's Embedding table ", (*tables)[0].variable,
                              " is sparse, and sparse tables start from their initializers; "
                              "give --dense_embeddings to start it from weights"));
    }
  }
  absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(path, *spec);
  if (!flat.ok()) {
    // The reader's message starts with the path; said once.
    absl::string_view why = flat.status().message();
    absl::ConsumePrefix(&why, f.initial_weights + ": ");
    return Bad("initial_weights", f.initial_weights, std::string(why));
  }
  opt->initial_weights = path;
  opt->initial_parameters = *std::move(flat);
  return absl::OkStatus();
}

// Clipping is done where the gradient Keras clips is known: an async
// worker's own, a ring worker's step mean, a sync step's mean on the ps
// (each clips its part by the norms they agree on). A sparse table's rows
// travel apart from the gradient: refused.
absl::Status CheckClipping(const ChiefFlags& f, const TrainingPlan& plan) {
  if (plan.clipnorm() <= 0 && plan.global_clipnorm() <= 0) return absl::OkStatus();
  const bool global = plan.global_clipnorm() > 0;
  const std::string flag = global ? "global_clipnorm" : "clipnorm";
  const std::string value = absl::StrCat(global ? plan.global_clipnorm() : plan.clipnorm());
  if (plan.strategy() == MULTI_WORKER_MIRRORED) return absl::OkStatus();
  if (!plan.dense_embeddings()) {
    absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan.model(), plan.model_json(), plan.loss());
    if (!spec.ok()) return Bad("model", f.model, std::string(spec.status().message()));
    absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(*spec);
    if (tables.ok() && !tables->empty()) {
      return Bad(flag, value,
                 "is not followed with sparse embedding tables (their rows travel apart from the "
                 "gradient): give --dense_embeddings");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string DescribeOptimizer(const OptimizerConfig& o) {
  const std::string& n = o.name();
  std::string d = absl::StrCat(n, ", learning_rate ", o.learning_rate());
  if (o.decay_steps() > 0) {
    absl::StrAppend(&d, " x ", o.decay_rate(), " every ", o.decay_steps(), " updates");
  }
  if (n == "momentum") absl::StrAppend(&d, ", momentum ", o.momentum());
  if (n == "adam" || n == "adamw") {
    absl::StrAppend(&d, ", beta_1 ", o.beta1(), ", beta_2 ", o.beta2(), ", epsilon ",
                    o.epsilon());
  }
  if (n == "adagrad") {
    absl::StrAppend(&d, ", initial_accumulator_value ", o.initial_accumulator_value(),
                    ", epsilon ", o.epsilon());
  }
  if (n == "rmsprop") {
    absl::StrAppend(&d, ", rho ", o.rho(), ", momentum ", o.momentum(), ", epsilon ", o.epsilon(),
                    o.centered() ? ", centered" : "");
  }
  if (n == "ftrl") {
    absl::StrAppend(&d, ", learning_rate_power ", o.learning_rate_power(),
                    ", initial_accumulator_value ", o.initial_accumulator_value(), ", l1 ", o.l1(),
                    ", l2 ", o.l2(), ", l2_shrinkage ", o.l2_shrinkage(), ", beta ", o.beta());
  }
  if (o.weight_decay() > 0) absl::StrAppend(&d, ", weight_decay ", o.weight_decay());
  return d;
}

absl::StatusOr<ChiefOptions> MakeChiefOptions(const ChiefFlags& flags, const TfConfig& config,
                                              std::vector<std::string>* warnings) {
  ChiefOptions opt;
  opt.config = config;
  // In the order the checks have always run: the first bad value is named.
  PSCLUSTER_RETURN_IF_ERROR(SetModelAndData(flags, &opt.plan));
  PSCLUSTER_RETURN_IF_ERROR(SetWire(flags, &opt.plan));
  PSCLUSTER_RETURN_IF_ERROR(SetOptimizer(flags, &opt.plan, &opt.optimizer, &opt.optimizer_origin));
  PSCLUSTER_RETURN_IF_ERROR(SetEmbeddings(flags, opt.optimizer, &opt.plan));
  PSCLUSTER_RETURN_IF_ERROR(CheckClipping(flags, opt.plan));
  PSCLUSTER_RETURN_IF_ERROR(SetCluster(flags, config, &opt, warnings));
  PSCLUSTER_RETURN_IF_ERROR(SetTimings(flags, &opt));
  PSCLUSTER_RETURN_IF_ERROR(SetCheckpointsAndPolicies(flags, &opt));
  SetPaths(flags, &opt);
  PSCLUSTER_RETURN_IF_ERROR(SetInitialWeights(flags, &opt, warnings));
  return opt;
}

}  // namespace pscluster
