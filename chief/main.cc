// chief: coordinates a training run over the ps, worker and evaluator tasks
// named in TF_CONFIG, and ends it: every task exits when the run is over.
// Prints one line at the end:
//   final: test_accuracy=0.9912 test_loss=0.0290 steps=N epochs=N wall_s=N
// or, with no evaluator in the cluster and no --data_dir,
//   final: not evaluated (no evaluator in TF_CONFIG; ...) steps=N ...
#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/chief.h"
#include "chief/strategy.h"
#include "common/daemon.h"
#include "wire/codec.h"
#include "wire/data_plane.h"
#include "model/keras_model.h"
#include "common/exit_codes.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"
#include "common/logging.h"
#include "model/model_spec.h"
#include "common/task_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, tf_config, "",
          "File holding the TF_CONFIG JSON; default: the TF_CONFIG variable");
ABSL_FLAG(std::string, model, "cnn",
          "Model to train: a built-in model (cnn: the seeds' CNN; mlp; vgg_fashion; mlp_large; "
          "mlp_deep) "
          "or the path of a Keras model file (model.to_json()'s .json, TensorFlow.js's "
          "model.json, or a .keras archive); it travels to every task in the plan");
ABSL_FLAG(int, epochs, 6, "Passes over the training set");
ABSL_FLAG(int, batch_size, 128,
          "Global batch: examples per step over all workers, split evenly between them");
ABSL_FLAG(std::string, mode, "sync", "sync or async");
ABSL_FLAG(std::string, strategy, "parameter_server",
          "Who sums the gradients: parameter_server (the ps tasks; sync or async) or "
          "multi_worker_mirrored (a ring all-reduce between the workers, each holding the "
          "whole model; sync; TF_CONFIG needs no ps)");
ABSL_FLAG(std::string, ring_codec, "fp32",
          "multi_worker_mirrored: the ring's wire encoding, fp32, bf16 or fp16 (sums are "
          "kept in fp32; replicas stay bit-identical whatever the codec)");
ABSL_FLAG(int64_t, ring_chunk_bytes, 1 << 20,
          "multi_worker_mirrored: the ring's pipelining unit, in bytes of fp32 values");
ABSL_FLAG(std::string, optimizer, "adam", "adam, sgd or momentum");
ABSL_FLAG(double, learning_rate, 0.002, "Optimizer learning rate");
ABSL_FLAG(double, lr_decay_rate, 0.5,
          "Learning rate decay: multiplied by this every --lr_decay_steps updates (smoothly)");
ABSL_FLAG(int64_t, lr_decay_steps, 1000, "Updates per --lr_decay_rate factor; 0: no decay");
ABSL_FLAG(double, momentum, 0.9, "Momentum coefficient (--optimizer=momentum)");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "sync: gradients averaged per step; fewer than the workers makes the "
          "slowest ones backup workers. 0: every worker");
ABSL_FLAG(int, max_staleness, 8,
          "async: no worker starts a chunk more than this many steps (rounds of one chunk per "
          "worker) ahead of the slowest unfinished chunk; it waits instead. Nothing is dropped");
ABSL_FLAG(uint64_t, seed, 1, "Seed for initial weights and data shuffling");
ABSL_FLAG(int64_t, min_shard_bytes, 64 << 10,
          "Variables are split over the ps in pieces of at least this many bytes");
ABSL_FLAG(std::string, push_codec, "fp32",
          "Wire encoding of the workers' gradients: fp32, bf16, fp16 (scaled), int8 (a scale per "
          "block of 256), topk (the --topk_fraction largest, with error feedback) or sign (1 bit "
          "and a scale, with error feedback); README \"Communication settings\"");
ABSL_FLAG(std::string, pull_codec, "fp32",
          "Wire encoding of the weights the workers pull each step: fp32, bf16 or fp16 (the "
          "weights), or int8, topk or sign (their change since the worker's weights, the error "
          "kept by the ps and sent later); the ps keeps fp32 masters, and the evaluator and the "
          "export always read fp32");
ABSL_FLAG(double, topk_fraction, 0.01, "--push_codec=topk: the fraction of each tensor sent");
ABSL_FLAG(int64_t, codec_min_elements, 1024,
          "Tensors (shards) of fewer values go as fp32 whatever the codecs");
ABSL_FLAG(std::string, transport, "grpc",
          "How the workers' push-pulls travel: grpc, or tcp (each ps's own data plane: one "
          "frame each way, no copies beyond the kernel's; TLS and the token as for gRPC)");
ABSL_FLAG(bool, push_overlap, true,
          "--transport=tcp: each worker sends a layer's gradient as soon as backprop has "
          "produced it, last layer first, while backprop goes on (false: after the step)");
ABSL_FLAG(bool, priority_pull, true,
          "--transport=tcp with --push_overlap: each worker writes the next step's weights "
          "layer by layer as they arrive and starts the forward pass on the first layers "
          "before the rest is in (false: once all are in)");
ABSL_FLAG(int, num_ps, 0, "If set, must equal the number of ps tasks in TF_CONFIG");
ABSL_FLAG(int, num_workers, 0, "If set, must equal the number of workers in TF_CONFIG");
ABSL_FLAG(int, wait_for_cluster_s, 120, "How long to wait for every task to answer");
ABSL_FLAG(double, log_every_s, 2, "Seconds between progress lines");
ABSL_FLAG(std::string, logdir, "",
          "Write TensorBoard event files (loss, accuracy, examples/s, staleness) here");
ABSL_FLAG(std::string, export_path, "",
          "Write the trained weights here (safetensors); default: <logdir>/model.safetensors "
          "when --logdir is set");
ABSL_FLAG(std::string, data_dir, "",
          "The data (IDX folder, .npy folder or .npz; its test split): with no evaluator "
          "in the cluster, the chief "
          "evaluates the final weights on them itself; default: no evaluation then");
ABSL_FLAG(int, metrics_port, 0, "Serve Prometheus /metrics on this port; 0: do not serve");
ABSL_FLAG(double, heartbeat_timeout_s, 3,
          "A worker without a heartbeat this long is lost: its unfinished data goes to the "
          "others and sync steps stop waiting for it until it is back");
ABSL_FLAG(int, ps_recovery_timeout_s, 300,
          "How long a lost ps may take to come back (restarted by the launcher, Compose or "
          "Kubernetes) before the run fails");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Write checkpoints here (default: <logdir>/checkpoints when --logdir is set); a "
          "restarted chief resumes from the newest");
ABSL_FLAG(int64_t, checkpoint_every_steps, 200, "Checkpoint every this many steps; 0: not by steps");
ABSL_FLAG(double, checkpoint_every_secs, 0, "Checkpoint every this many seconds; 0: not by time");
ABSL_FLAG(int, keep_checkpoints, 3, "Checkpoints kept on disk (the newest)");
ABSL_FLAG(std::string, async_lr_scaling, "sqrt",
          "async: each update carries 1/num_workers of the global batch; its learning rate is "
          "--learning_rate times 1/sqrt(num_workers) (sqrt, Adam's batch-size rule), "
          "1/num_workers (linear, SGD's) or 1 (none), and --lr_decay_steps counts rounds of "
          "num_workers updates, so that an epoch decays the rate as in sync mode");
ABSL_FLAG(std::string, nonfinite_gradients, "reject",
          "A gradient with NaN or Inf: reject (refuse the push and count it) or skip_step "
          "(accept it and skip the update it belongs to)");

namespace {

[[noreturn]] void Bad(const std::string& flag, const std::string& value, const std::string& want) {
  pscluster::ExitWithUsageError(absl::StrCat("--", flag, "=", value, ": ", want));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pscluster;
  BlockTerminationSignals();
  TuneAllocator();
  ParseFlagsOrExit(argc, argv, 
      "Chief task: coordinates training. Usage: TF_CONFIG='{...\"task\":{\"type\":"
      "\"chief\",\"index\":0}}' chief [--epochs=N] [--mode=sync|async] ...");
  TfConfig config = LoadTfConfigOrExit(absl::GetFlag(FLAGS_tf_config),
                                       std::getenv("TF_CONFIG"), kChiefJob);
  ConfigureSecurityOrExit(config);  // TLS and token for every channel and server
  ChiefOptions opt;
  opt.config = config;
  TrainingPlan& plan = opt.plan;
  const std::string model = absl::GetFlag(FLAGS_model);
  absl::StatusOr<std::string> model_json = ReadModelFile(model);
  absl::StatusOr<ModelSpec> model_spec =
      model_json.ok() ? ParseKerasModel(*model_json, model) : model_json.status();
  if (!model_spec.ok()) Bad("model", model, std::string(model_spec.status().message()));
  plan.set_model(model);
  plan.set_model_json(*model_json);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  if (epochs < 1 || epochs > 100000) Bad("epochs", std::to_string(epochs), "must be in [1, 100000]");
  plan.set_epochs(epochs);
  const int batch = absl::GetFlag(FLAGS_batch_size);
  if (batch < 1 || batch > 1 << 20) Bad("batch_size", std::to_string(batch), "must be in [1, 1048576]");
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "sync") {
    plan.set_mode(SYNC);
  } else if (mode == "async") {
    plan.set_mode(ASYNC);
  } else {
    Bad("mode", mode, "must be sync or async");
  }
  plan.set_seed(absl::GetFlag(FLAGS_seed));
  const int64_t min_shard = absl::GetFlag(FLAGS_min_shard_bytes);
  if (min_shard < 4) Bad("min_shard_bytes", std::to_string(min_shard), "must be >= 4");
  plan.set_min_shard_bytes(min_shard);
  plan.set_report_interval_s(1.0f);
  const std::string push_codec = absl::GetFlag(FLAGS_push_codec);
  const absl::StatusOr<Codec> push = ParseCodec(push_codec);
  if (!push.ok()) Bad("push_codec", push_codec, std::string(push.status().message()));
  const std::string pull_codec = absl::GetFlag(FLAGS_pull_codec);
  const absl::StatusOr<Codec> pull = ParseCodec(pull_codec);
  if (!pull.ok()) Bad("pull_codec", pull_codec, std::string(pull.status().message()));
  const double topk = absl::GetFlag(FLAGS_topk_fraction);
  if (!(topk > 0.0 && topk <= 1.0)) Bad("topk_fraction", std::to_string(topk), "must be in (0, 1]");
  const int64_t codec_min = absl::GetFlag(FLAGS_codec_min_elements);
  if (codec_min < 0) Bad("codec_min_elements", std::to_string(codec_min), "must be >= 0");
  plan.set_push_codec(CodecToProto(*push));
  plan.set_pull_codec(CodecToProto(*pull));
  plan.set_topk_fraction(topk);
  plan.set_codec_min_elements(codec_min);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  const absl::StatusOr<Transport> parsed_transport = ParseTransport(transport);
  if (!parsed_transport.ok()) {
    Bad("transport", transport, std::string(parsed_transport.status().message()));
  }
  plan.set_transport(*parsed_transport);
  plan.set_push_overlap(absl::GetFlag(FLAGS_push_overlap));
  plan.set_priority_pull(absl::GetFlag(FLAGS_priority_pull));
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  const absl::StatusOr<Strategy> parsed_strategy = ParseStrategy(strategy);
  if (!parsed_strategy.ok()) Bad("strategy", strategy, std::string(parsed_strategy.status().message()));
  const bool mirrored = *parsed_strategy == MULTI_WORKER_MIRRORED;
  plan.set_strategy(*parsed_strategy);
  const std::string ring_codec = absl::GetFlag(FLAGS_ring_codec);
  const absl::StatusOr<Codec> ring = ParseCodec(ring_codec);
  if (!ring.ok() || (*ring != Codec::kFloat32 && *ring != Codec::kBfloat16 &&
                     *ring != Codec::kFloat16)) {
    Bad("ring_codec", ring_codec, "must be fp32, bf16 or fp16");
  }
  const int64_t ring_chunk = absl::GetFlag(FLAGS_ring_chunk_bytes);
  if (ring_chunk < 4 || ring_chunk > (256 << 20)) {
    Bad("ring_chunk_bytes", std::to_string(ring_chunk), "must be in [4, 268435456]");
  }
  if (mirrored) {
    // Settings of the parameter servers' wire and updates have no meaning
    // for the ring: refused rather than silently ignored.
    if (mode != "sync") Bad("mode", mode, "multi_worker_mirrored is synchronous");
    if (*push != Codec::kFloat32 || *pull != Codec::kFloat32) {
      Bad(*push != Codec::kFloat32 ? "push_codec" : "pull_codec",
          *push != Codec::kFloat32 ? push_codec : pull_codec,
          "applies to --strategy=parameter_server; the ring's is --ring_codec");
    }
    if (*parsed_transport != TRANSPORT_GRPC) {
      Bad("transport", transport, "applies to --strategy=parameter_server (the ring uses gRPC)");
    }
    plan.set_ring_codec(CodecToProto(*ring));
    plan.set_ring_chunk_bytes(ring_chunk);
  } else if (*ring != Codec::kFloat32) {
    Bad("ring_codec", ring_codec, "applies to --strategy=multi_worker_mirrored");
  }

  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  if (optimizer != "adam" && optimizer != "sgd" && optimizer != "momentum") {
    Bad("optimizer", optimizer, "must be adam, sgd or momentum");
  }
  const double lr = absl::GetFlag(FLAGS_learning_rate);
  if (!(lr > 0 && lr < 1e6)) Bad("learning_rate", std::to_string(lr), "must be > 0");
  const double momentum = absl::GetFlag(FLAGS_momentum);
  if (!(momentum >= 0 && momentum < 1)) Bad("momentum", std::to_string(momentum), "must be in [0, 1)");
  const double decay_rate = absl::GetFlag(FLAGS_lr_decay_rate);
  if (!(decay_rate > 0 && decay_rate <= 1)) {
    Bad("lr_decay_rate", std::to_string(decay_rate), "must be in (0, 1]");
  }
  const int64_t decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  if (decay_steps < 0) Bad("lr_decay_steps", std::to_string(decay_steps), "must be >= 0");
  opt.optimizer.set_decay_rate(static_cast<float>(decay_rate));
  opt.optimizer.set_decay_steps(decay_steps);
  opt.optimizer.set_name(optimizer);
  opt.optimizer.set_learning_rate(static_cast<float>(lr));
  opt.optimizer.set_momentum(static_cast<float>(momentum));
  opt.optimizer.set_beta1(0.9f);
  opt.optimizer.set_beta2(0.999f);
  opt.optimizer.set_epsilon(1e-7f);

  const int num_workers = config.cluster.num_tasks(kWorkerJob);
  const int num_ps = config.cluster.num_tasks(kPsJob);
  const int want_ps = absl::GetFlag(FLAGS_num_ps);
  const int want_workers = absl::GetFlag(FLAGS_num_workers);
  if (want_ps != 0 && want_ps != num_ps) {
    Bad("num_ps", std::to_string(want_ps),
        absl::StrCat(config.source, " lists ", num_ps, " ps tasks"));
  }
  if (want_workers != 0 && want_workers != num_workers) {
    Bad("num_workers", std::to_string(want_workers),
        absl::StrCat(config.source, " lists ", num_workers, " workers"));
  }
  if (batch < num_workers) {
    Bad("batch_size", std::to_string(batch),
        absl::StrCat("a global batch needs at least one example for each of the ", num_workers,
                     " workers"));
  }
  // Each worker takes an equal share; a remainder is dropped (and said).
  plan.set_batch_size(batch / num_workers);
  if (batch % num_workers != 0) {
    std::fprintf(stderr, "warning: --batch_size=%d is not a multiple of %d workers: %d per worker, %d per step\n",
                 batch, num_workers, batch / num_workers, batch / num_workers * num_workers);
  }
  const int replicas = absl::GetFlag(FLAGS_replicas_to_aggregate);
  if (mirrored && replicas != 0 && replicas != num_workers) {
    Bad("replicas_to_aggregate", std::to_string(replicas),
        "multi_worker_mirrored sums every worker's gradient (no backup workers)");
  }
  if (!mirrored && num_ps < 1) {
    ExitWithUsageError(absl::StrCat(config.source, " lists no ps tasks: --strategy=",
                                    StrategyName(PARAMETER_SERVER),
                                    " needs at least one (or use --strategy=",
                                    StrategyName(MULTI_WORKER_MIRRORED), ")"));
  }
  if (replicas < 0 || replicas > num_workers) {
    Bad("replicas_to_aggregate", std::to_string(replicas),
        absl::StrCat("must be in [0, ", num_workers, "] (the workers in ", config.source, ")"));
  }
  opt.replicas_to_aggregate = replicas;
  const int staleness = absl::GetFlag(FLAGS_max_staleness);
  if (staleness < 0) Bad("max_staleness", std::to_string(staleness), "must be >= 0");
  opt.max_staleness = staleness;
  const int wait = absl::GetFlag(FLAGS_wait_for_cluster_s);
  if (wait < 1) Bad("wait_for_cluster_s", std::to_string(wait), "must be >= 1");
  opt.wait_for_cluster = absl::Seconds(wait);
  const double log_every = absl::GetFlag(FLAGS_log_every_s);
  if (!(log_every > 0)) Bad("log_every_s", std::to_string(log_every), "must be > 0");
  opt.log_every = absl::Seconds(log_every);
  const double heartbeat = absl::GetFlag(FLAGS_heartbeat_timeout_s);
  if (!(heartbeat >= 0.5 && heartbeat <= 3600)) {
    Bad("heartbeat_timeout_s", std::to_string(heartbeat), "must be in [0.5, 3600]");
  }
  opt.heartbeat_timeout = absl::Seconds(heartbeat);
  opt.heartbeat_interval = std::min(absl::Milliseconds(500), opt.heartbeat_timeout / 4);
  const int recovery = absl::GetFlag(FLAGS_ps_recovery_timeout_s);
  if (recovery < 1) Bad("ps_recovery_timeout_s", std::to_string(recovery), "must be >= 1");
  opt.ps_recovery_timeout = absl::Seconds(recovery);
  const int64_t every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  if (every_steps < 0) Bad("checkpoint_every_steps", std::to_string(every_steps), "must be >= 0");
  opt.checkpoint_every_steps = every_steps;
  const double every_secs = absl::GetFlag(FLAGS_checkpoint_every_secs);
  if (!(every_secs >= 0)) Bad("checkpoint_every_secs", std::to_string(every_secs), "must be >= 0");
  opt.checkpoint_every = absl::Seconds(every_secs);
  const int keep = absl::GetFlag(FLAGS_keep_checkpoints);
  if (keep < 1) Bad("keep_checkpoints", std::to_string(keep), "must be >= 1");
  opt.keep_checkpoints = keep;
  const std::string lr_scaling = absl::GetFlag(FLAGS_async_lr_scaling);
  if (lr_scaling == "sqrt") {
    opt.async_lr_scaling = pscluster::AsyncLrScaling::kSqrt;
  } else if (lr_scaling == "linear") {
    opt.async_lr_scaling = pscluster::AsyncLrScaling::kLinear;
  } else if (lr_scaling == "none") {
    opt.async_lr_scaling = pscluster::AsyncLrScaling::kNone;
  } else {
    Bad("async_lr_scaling", lr_scaling, "must be sqrt, linear or none");
  }
  const std::string nonfinite = absl::GetFlag(FLAGS_nonfinite_gradients);
  if (nonfinite == "reject") {
    opt.nonfinite = NONFINITE_REJECT;
  } else if (nonfinite == "skip_step") {
    opt.nonfinite = NONFINITE_SKIP_STEP;
  } else {
    Bad("nonfinite_gradients", nonfinite, "must be reject or skip_step");
  }

  opt.logdir = absl::GetFlag(FLAGS_logdir);
  opt.export_path = absl::GetFlag(FLAGS_export_path);
  if (opt.export_path.empty() && !opt.logdir.empty()) {
    opt.export_path = opt.logdir + "/model.safetensors";
  }
  opt.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (opt.checkpoint_dir.empty() && !opt.logdir.empty()) {
    opt.checkpoint_dir = opt.logdir + "/checkpoints";
  }

  opt.data_dir = absl::GetFlag(FLAGS_data_dir);
  // The data last: every flag and TF_CONFIG check comes first (exit 2);
  // missing test files exit 4, like a worker's or the evaluator's.
  if (!opt.data_dir.empty()) {
    if (absl::Status s = CheckDataFiles(opt.data_dir, Split::kTest); !s.ok()) {
      ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", s.message()));
    }
    // Data that does not fit the model is refused before anything trains.
    absl::StatusOr<Dataset> test = LoadDataset(opt.data_dir, Split::kTest);
    absl::Status fits = test.ok() ? CheckDatasetFitsModel(*test, opt.data_dir, *model_spec)
                                  : test.status();
    if (!fits.ok()) {
      ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", fits.message()));
    }
  }

  InitLogging(TaskName(config.task));
  std::unique_ptr<Metrics> metrics =
      StartMetricsOrExit(absl::GetFlag(FLAGS_metrics_port), config.task);
  Chief chief(opt, metrics.get());
  HandleTerminationSignals([&](const std::string& s) { chief.RequestStop(s); });
  absl::StatusOr<RunResult> result = chief.Run();
  if (!result.ok()) {
    spdlog::error("{}", std::string(result.status().message()));
    if (absl::IsCancelled(result.status())) return kExitInterrupted;
    if (chief.gave_up()) {
      spdlog::error("the run failed; every task was told to stop (exit code {})",
                    kExitRunFailed);
      return kExitRunFailed;
    }
    return kExitError;
  }
  std::printf("%s\n", FinalLine(*result).c_str());
  std::fflush(stdout);
  return 0;
}
