// chief: coordinates a training run over the ps, worker and evaluator tasks
// named in TF_CONFIG, and ends it: every task exits when the run is over.
// Prints one line at the end:
//   final: test_accuracy=0.9912 test_loss=0.0290 steps=N epochs=N wall_s=N
// or, with no evaluator in the cluster and no --data_dir,
//   final: not evaluated (no evaluator in TF_CONFIG; ...) steps=N ...
// main parses the flags, checks them (chief/chief_flags.h) and the data,
// creates the Chief, runs it and turns its outcome into the exit code.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "chief/chief.h"
#include "chief/chief_flags.h"
#include "common/bad_input.h"
#include "common/daemon.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/task_server.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "spdlog/spdlog.h"

namespace {
// The flags' defaults are ChiefFlags's.
const pscluster::ChiefFlags kDefaults;
}  // namespace

ABSL_FLAG(std::string, model, kDefaults.model,
          "Model to train: a built-in model (cnn: the built-in CNN; mlp; vgg_fashion; mlp_large; "
          "mlp_deep) "
          "or the path of a Keras model file (model.to_json()'s .json, TensorFlow.js's "
          "model.json, or a .keras archive); it travels to every task in the plan");
ABSL_FLAG(std::string, loss, kDefaults.loss,
          "The loss: sparse_categorical_crossentropy, categorical_crossentropy (one-hot or soft "
          "labels), binary_crossentropy, mse or mae (Keras's names and spellings). Empty: the "
          "model file's compiled loss, else binary cross-entropy for a sigmoid output and sparse "
          "categorical cross-entropy for any other");
ABSL_FLAG(int, epochs, kDefaults.epochs, "Passes over the training set");
ABSL_FLAG(int, batch_size, kDefaults.batch_size,
          "Global batch: examples per step over all workers, split evenly between them");
ABSL_FLAG(std::string, mode, kDefaults.mode, "sync or async");
ABSL_FLAG(std::string, strategy, kDefaults.strategy,
          "Who sums the gradients: parameter_server (the ps tasks; sync or async) or "
          "multi_worker_mirrored (a ring all-reduce between the workers, each holding the "
          "whole model; sync; TF_CONFIG needs no ps)");
ABSL_FLAG(std::string, ring_codec, kDefaults.ring_codec,
          "multi_worker_mirrored: the ring's wire encoding, fp32, bf16 or fp16 (sums are "
          "kept in fp32; replicas stay bit-identical whatever the codec)");
ABSL_FLAG(int64_t, ring_chunk_bytes, kDefaults.ring_chunk_bytes,
          "multi_worker_mirrored: the ring's pipelining unit, in bytes of fp32 values");
ABSL_FLAG(std::string, optimizer, kDefaults.optimizer,
          "adam, sgd, momentum, adamw, adagrad, rmsprop or ftrl, with Keras's rules and "
          "defaults. Not given: the --model file's compiled optimizer if it has one (the "
          "optimizer flags given replace its values), else adam");
ABSL_FLAG(double, learning_rate, kDefaults.learning_rate, "Optimizer learning rate");
ABSL_FLAG(double, weight_decay, kDefaults.weight_decay,
          "Decoupled weight decay of every optimizer (p -= p * weight_decay * lr before each "
          "step, as Keras); -1: the optimizer's Keras default (adamw 0.004, others 0)");
ABSL_FLAG(double, clipnorm, kDefaults.clipnorm,
          "Clip each variable's gradient to this norm before the update, as Keras's clipnorm: "
          "the step's mean (sync: on the ps, which agree on the norms; multi_worker_mirrored) "
          "or each worker its own (--mode=async); 0: none");
ABSL_FLAG(double, global_clipnorm, kDefaults.global_clipnorm,
          "Clip all the gradients together to this global norm, as Keras's global_clipnorm: "
          "the step's mean (sync: on the ps, which agree on the norm; multi_worker_mirrored) "
          "or each worker its own (--mode=async); 0: none");
ABSL_FLAG(bool, embedding_rows_ahead, kDefaults.embedding_rows_ahead,
          "Sparse embedding tables: each worker's next batch's rows come with its push-pull "
          "(the chief names each worker's next chunk): one round trip a step; false: pulled "
          "before each step, a second round trip");
ABSL_FLAG(bool, dense_embeddings, kDefaults.dense_embeddings,
          "Send Keras Embedding tables whole, as every other variable (false: as the rows each "
          "batch touches, spread over the ps by id)");
ABSL_FLAG(std::string, embedding_optimizer, kDefaults.embedding_optimizer,
          "The per-row optimizer of sparse embedding tables: sgd, adagrad, adam (lazy) or ftrl; "
          "empty: --optimizer's (sgd or adam)");
ABSL_FLAG(double, embedding_learning_rate, kDefaults.embedding_learning_rate,
          "Learning rate of sparse embedding tables (decayed by --embedding_lr_decay_*, not "
          "--lr_decay_*); 0: --learning_rate");
ABSL_FLAG(int32_t, embedding_admit_after, kDefaults.embedding_admit_after,
          "A sparse table's new id gets a row once its gradient has come this many times "
          "(until then it reads its initial values)");
ABSL_FLAG(int64_t, embedding_evict_after, kDefaults.embedding_evict_after,
          "Drop a sparse table's rows not updated for this many updates; 0: never");
ABSL_FLAG(bool, embedding_unbounded, kDefaults.embedding_unbounded,
          "Sparse embedding tables take any int64 id >= 0 (such as a Criteo folder's int64 "
          "keys), their Embedding's input_dim ignored; rows are made as ids come");
ABSL_FLAG(double, embedding_initial_accumulator, kDefaults.embedding_initial_accumulator,
          "Adagrad's and FTRL's initial accumulator of a sparse table's row (Keras's "
          "initial_accumulator_value); smaller: larger first steps of rare rows");
ABSL_FLAG(double, embedding_lr_decay_rate, kDefaults.embedding_lr_decay_rate,
          "Sparse embedding tables' learning rate decay: multiplied by this every "
          "--embedding_lr_decay_steps updates (smoothly)");
ABSL_FLAG(int64_t, embedding_lr_decay_steps, kDefaults.embedding_lr_decay_steps,
          "Updates per --embedding_lr_decay_rate factor (async: rounds of num_workers updates, "
          "as --lr_decay_steps); 0: the tables' rate is constant");
ABSL_FLAG(double, embedding_l1, kDefaults.embedding_l1,
          "FTRL's L1 regularization strength for sparse embedding rows (--embedding_optimizer=ftrl "
          "only): a row coordinate stays 0 until its gradients outweigh it");
ABSL_FLAG(double, embedding_l2, kDefaults.embedding_l2,
          "FTRL's L2 regularization strength for sparse embedding rows (--embedding_optimizer=ftrl "
          "only)");
ABSL_FLAG(double, lr_decay_rate, kDefaults.lr_decay_rate,
          "Learning rate decay: multiplied by this every --lr_decay_steps updates (smoothly)");
ABSL_FLAG(int64_t, lr_decay_steps, kDefaults.lr_decay_steps, "Updates per --lr_decay_rate factor; 0: no decay");
ABSL_FLAG(double, momentum, kDefaults.momentum,
          "Momentum coefficient (--optimizer=momentum; rmsprop's when given, else 0 as Keras)");
ABSL_FLAG(int, replicas_to_aggregate, kDefaults.replicas_to_aggregate,
          "sync: gradients averaged per step; fewer than the workers makes the "
          "slowest ones backup workers. 0: every worker");
ABSL_FLAG(int, min_workers, kDefaults.min_workers,
          "Start training once this many of TF_CONFIG's workers answer (with every ps and the "
          "evaluator); the others join the running job when they answer, from the next step. "
          "0: every worker");
ABSL_FLAG(int, min_ps, kDefaults.min_ps,
          "Start training once the first this many of TF_CONFIG's ps answer; each next ps is "
          "added when it answers, and a ps stopped by SIGTERM is drained (the shards are placed "
          "again over the others, training paused meanwhile) before it exits. 0: every ps, a "
          "fixed set");
ABSL_FLAG(int, max_staleness, kDefaults.max_staleness,
          "async: no worker starts a chunk more than this many steps (rounds of one chunk per "
          "worker) ahead of the slowest unfinished chunk; it waits instead. Nothing is dropped");
ABSL_FLAG(uint64_t, seed, kDefaults.seed, "Seed for initial weights and data shuffling");
ABSL_FLAG(int64_t, min_shard_bytes, kDefaults.min_shard_bytes,
          "Variables are split over the ps in pieces of at least this many bytes");
ABSL_FLAG(std::string, push_codec, kDefaults.push_codec,
          "Wire encoding of the workers' gradients: fp32, bf16, fp16 (scaled), int8 (a scale per "
          "block of 256), topk (the --topk_fraction largest, with error feedback) or sign (1 bit "
          "and a scale, with error feedback); docs/communication.md");
ABSL_FLAG(std::string, pull_codec, kDefaults.pull_codec,
          "Wire encoding of the weights the workers pull each step: fp32, bf16 or fp16 (the "
          "weights), or int8, topk or sign (their change since the worker's weights, the error "
          "kept by the ps and sent later); the ps keeps fp32 masters, and the evaluator and the "
          "export always read fp32");
ABSL_FLAG(double, topk_fraction, kDefaults.topk_fraction, "--push_codec=topk: the fraction of each tensor sent");
ABSL_FLAG(int64_t, codec_min_elements, kDefaults.codec_min_elements,
          "Tensors (shards) of fewer values go as fp32 whatever the codecs");
ABSL_FLAG(std::string, transport, kDefaults.transport,
          "How the workers' push-pulls travel: tcp (each ps's own data plane: one frame each "
          "way, no copies beyond the kernel's; TLS and the token as for gRPC), grpc, or auto: "
          "tcp under --strategy=parameter_server (the ring has its own)");
ABSL_FLAG(bool, push_overlap, kDefaults.push_overlap,
          "Over the tcp data plane (the default transport): each worker sends a layer's "
          "gradient as soon as backprop has produced it, last layer first, while backprop goes "
          "on (false: after the step)");
ABSL_FLAG(bool, priority_pull, kDefaults.priority_pull,
          "Over the tcp data plane with --push_overlap: each worker writes the next step's "
          "weights layer by layer as they arrive and starts the forward pass on the first "
          "layers before the rest is in (false: once all are in)");
ABSL_FLAG(int, num_ps, kDefaults.num_ps, "If set, must equal the number of ps tasks in TF_CONFIG");
ABSL_FLAG(int, num_workers, kDefaults.num_workers, "If set, must equal the number of workers in TF_CONFIG");
ABSL_FLAG(int, wait_for_cluster_s, kDefaults.wait_for_cluster_s, "How long to wait for every task to answer");
ABSL_FLAG(double, log_every_s, kDefaults.log_every_s, "Seconds between progress lines");
ABSL_FLAG(std::string, logdir, kDefaults.logdir,
          "Write TensorBoard event files (loss, accuracy, examples/s, staleness) here");
ABSL_FLAG(std::string, export_path, kDefaults.export_path,
          "Write the trained weights here (safetensors); default: <logdir>/model.safetensors "
          "when --logdir is set");
ABSL_FLAG(std::string, data_dir, kDefaults.data_dir,
          "The data (IDX folder, .npy folder, .npz or TFRecord folder; its test split): with "
          "no evaluator "
          "in the cluster, the chief "
          "evaluates the final weights on them itself; default: no evaluation then");
ABSL_FLAG(double, heartbeat_timeout_s, kDefaults.heartbeat_timeout_s,
          "A worker without a heartbeat this long is lost: its unfinished data goes to the "
          "others and sync steps stop waiting for it until it is back");
ABSL_FLAG(int, ps_replicas, kDefaults.ps_replicas,
          "Backups of each ps's store, kept up to date on the next R ps before a worker is "
          "answered (0 to 3, below the ps count; R >= 2 needs every ps_server started with "
          "--backup_stores=R). A lost ps's backup serves its shards at once: no checkpoint "
          "read, no step redone (a ps whose backups are all lost too is still restored from "
          "the checkpoint; docs/replication.md)");
ABSL_FLAG(int, ps_recovery_timeout_s, kDefaults.ps_recovery_timeout_s,
          "How long a lost ps may take to come back (restarted by the launcher, Compose or "
          "Kubernetes) before the run fails");
ABSL_FLAG(std::string, checkpoint_dir, kDefaults.checkpoint_dir,
          "Write checkpoints here (default: <logdir>/checkpoints when --logdir is set); a "
          "restarted chief resumes from the newest");
ABSL_FLAG(int64_t, checkpoint_every_steps, kDefaults.checkpoint_every_steps, "Checkpoint every this many steps; 0: not by steps");
ABSL_FLAG(double, checkpoint_every_secs, kDefaults.checkpoint_every_secs, "Checkpoint every this many seconds; 0: not by time");
ABSL_FLAG(int, keep_checkpoints, kDefaults.keep_checkpoints, "Checkpoints kept on disk (the newest)");
ABSL_FLAG(std::string, async_lr_scaling, kDefaults.async_lr_scaling,
          "async: each update carries 1/num_workers of the global batch; its learning rate is "
          "--learning_rate times 1/sqrt(num_workers) (sqrt, Adam's batch-size rule), "
          "1/num_workers (linear, SGD's) or 1 (none), and --lr_decay_steps counts rounds of "
          "num_workers updates, so that an epoch decays the rate as in sync mode; the same for "
          "the sparse tables' --embedding_learning_rate and --embedding_lr_decay_steps");
ABSL_FLAG(std::string, initial_weights, kDefaults.initial_weights,
          "Start from these weights instead of the model's seeded initializers: a .keras "
          "archive (its model.weights.h5), a Keras .weights.h5 or Keras 2 save_weights .h5 "
          "file, or a .safetensors file (what --export_path writes); 'archive': the weights in "
          "the --model .keras archive (not taken unless asked for: the chief warns that they are "
          "there). Every variable must be in "
          "the file with the model's shape as float32, and nothing else (a Keras file's "
          "optimizer state is skipped); a mismatch exits 2 naming each. A resumed run (the ps "
          "still initialised, or a checkpoint in --checkpoint_dir) keeps the checkpoint's "
          "weights: the checkpoint wins");
ABSL_FLAG(std::string, nonfinite_gradients, kDefaults.nonfinite_gradients,
          "A gradient with NaN or Inf: reject (refuse the push and count it) or skip_step "
          "(accept it and skip the update it belongs to)");

namespace {

pscluster::ChiefFlags ReadFlags(int argc, char** argv) {
  pscluster::ChiefFlags f;
  f.given = pscluster::FlagsGiven(argc, argv);
  f.model = absl::GetFlag(FLAGS_model);
  f.loss = absl::GetFlag(FLAGS_loss);
  f.epochs = absl::GetFlag(FLAGS_epochs);
  f.batch_size = absl::GetFlag(FLAGS_batch_size);
  f.mode = absl::GetFlag(FLAGS_mode);
  f.strategy = absl::GetFlag(FLAGS_strategy);
  f.ring_codec = absl::GetFlag(FLAGS_ring_codec);
  f.ring_chunk_bytes = absl::GetFlag(FLAGS_ring_chunk_bytes);
  f.optimizer = absl::GetFlag(FLAGS_optimizer);
  f.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  f.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  f.clipnorm = absl::GetFlag(FLAGS_clipnorm);
  f.global_clipnorm = absl::GetFlag(FLAGS_global_clipnorm);
  f.dense_embeddings = absl::GetFlag(FLAGS_dense_embeddings);
  f.embedding_rows_ahead = absl::GetFlag(FLAGS_embedding_rows_ahead);
  f.embedding_optimizer = absl::GetFlag(FLAGS_embedding_optimizer);
  f.embedding_learning_rate = absl::GetFlag(FLAGS_embedding_learning_rate);
  f.embedding_admit_after = absl::GetFlag(FLAGS_embedding_admit_after);
  f.embedding_evict_after = absl::GetFlag(FLAGS_embedding_evict_after);
  f.embedding_unbounded = absl::GetFlag(FLAGS_embedding_unbounded);
  f.embedding_initial_accumulator = absl::GetFlag(FLAGS_embedding_initial_accumulator);
  f.embedding_lr_decay_rate = absl::GetFlag(FLAGS_embedding_lr_decay_rate);
  f.embedding_lr_decay_steps = absl::GetFlag(FLAGS_embedding_lr_decay_steps);
  f.embedding_l1 = absl::GetFlag(FLAGS_embedding_l1);
  f.embedding_l2 = absl::GetFlag(FLAGS_embedding_l2);
  f.lr_decay_rate = absl::GetFlag(FLAGS_lr_decay_rate);
  f.lr_decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  f.momentum = absl::GetFlag(FLAGS_momentum);
  f.replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  f.min_workers = absl::GetFlag(FLAGS_min_workers);
  f.min_ps = absl::GetFlag(FLAGS_min_ps);
  f.max_staleness = absl::GetFlag(FLAGS_max_staleness);
  f.seed = absl::GetFlag(FLAGS_seed);
  f.min_shard_bytes = absl::GetFlag(FLAGS_min_shard_bytes);
  f.push_codec = absl::GetFlag(FLAGS_push_codec);
  f.pull_codec = absl::GetFlag(FLAGS_pull_codec);
  f.topk_fraction = absl::GetFlag(FLAGS_topk_fraction);
  f.codec_min_elements = absl::GetFlag(FLAGS_codec_min_elements);
  f.transport = absl::GetFlag(FLAGS_transport);
  f.push_overlap = absl::GetFlag(FLAGS_push_overlap);
  f.priority_pull = absl::GetFlag(FLAGS_priority_pull);
  f.num_ps = absl::GetFlag(FLAGS_num_ps);
  f.num_workers = absl::GetFlag(FLAGS_num_workers);
  f.wait_for_cluster_s = absl::GetFlag(FLAGS_wait_for_cluster_s);
  f.log_every_s = absl::GetFlag(FLAGS_log_every_s);
  f.logdir = absl::GetFlag(FLAGS_logdir);
  f.export_path = absl::GetFlag(FLAGS_export_path);
  f.data_dir = absl::GetFlag(FLAGS_data_dir);
  f.heartbeat_timeout_s = absl::GetFlag(FLAGS_heartbeat_timeout_s);
  f.ps_recovery_timeout_s = absl::GetFlag(FLAGS_ps_recovery_timeout_s);
  f.ps_replicas = absl::GetFlag(FLAGS_ps_replicas);
  f.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  f.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  f.checkpoint_every_secs = absl::GetFlag(FLAGS_checkpoint_every_secs);
  f.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  f.async_lr_scaling = absl::GetFlag(FLAGS_async_lr_scaling);
  f.nonfinite_gradients = absl::GetFlag(FLAGS_nonfinite_gradients);
  f.initial_weights = absl::GetFlag(FLAGS_initial_weights);
  return f;
}

// The data last: every flag and TF_CONFIG check comes first (exit 2);
// missing test files exit 4, like a worker's or the evaluator's, and so
// does data that does not fit the model (refused before anything trains).
void CheckDataOrExit(const pscluster::ChiefOptions& opt) {
  using namespace pscluster;
  if (opt.data_dir.empty()) return;
  if (absl::Status s = CheckDataFiles(opt.data_dir, Split::kTest); !s.ok()) {
    ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", s.message()));
  }
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(opt.plan.model(), opt.plan.model_json(), opt.plan.loss());
  absl::StatusOr<Dataset> test = LoadDataset(
      opt.data_dir, Split::kTest, spec.ok() ? OutputNames(*spec) : std::vector<std::string>());
  absl::Status fits = !spec.ok()   ? spec.status()
                      : test.ok() ? CheckDatasetFitsModel(*test, opt.data_dir, *spec)
                                  : test.status();
  if (!fits.ok()) {
    ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", fits.message()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pscluster;
  const TfConfig config = StartDaemonOrExit(
      argc, argv, std::getenv("TF_CONFIG"), kChiefJob,
      "Chief task: coordinates training. Usage: TF_CONFIG='{...\"task\":{\"type\":"
      "\"chief\",\"index\":0}}' chief [--epochs=N] [--mode=sync|async] ...");
  std::vector<std::string> warnings;
  absl::StatusOr<ChiefOptions> opt = MakeChiefOptions(ReadFlags(argc, argv), config, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!opt.ok()) ExitWithUsageError(std::string(opt.status().message()));
  CheckDataOrExit(*opt);

  std::unique_ptr<Metrics> metrics = StartLoggingAndMetricsOrExit(config);
  spdlog::info("optimizer: {}{} ({})", DescribeOptimizer(opt->optimizer),
               opt->plan.clipnorm() > 0          ? absl::StrCat(", clipnorm ", opt->plan.clipnorm())
               : opt->plan.global_clipnorm() > 0 ? absl::StrCat(", global_clipnorm ",
                                                                opt->plan.global_clipnorm())
                                                 : std::string(),
               opt->optimizer_origin);
  opt->move_keeps_in_place = std::getenv("PSCLUSTER_TEST_MOVE_SENDS_ALL") == nullptr;
  Chief chief(*std::move(opt), metrics.get());
  HandleTerminationSignals([&](const std::string& s) { chief.RequestStop(s); });
  absl::StatusOr<RunResult> result = chief.Run();
  if (!result.ok()) {
    spdlog::error("{}", std::string(result.status().message()));
    if (absl::IsCancelled(result.status())) return kExitInterrupted;
    if (IsBadInput(result.status())) return kExitBadInput;
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
