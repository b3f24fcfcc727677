// ChiefFlags: the chief's command-line values as parsed (chief/main.cc
// defines the flags, with these defaults), and MakeChiefOptions, which
// checks them against each other and the cluster and turns them into the
// run's ChiefOptions. Plain data and a plain function (it reads a model
// file named by --model); thread-safe.
#ifndef PSCLUSTER_CHIEF_CHIEF_FLAGS_H_
#define PSCLUSTER_CHIEF_CHIEF_FLAGS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chief/chief_options.h"
#include "common/cluster_spec.h"

namespace pscluster {

// --ps_replicas' largest: each backup is another store on every ps process
// (ps_server --backup_stores) and a copy sent per update.
inline constexpr int kMaxPsReplicas = 3;

struct ChiefFlags {
  std::string model = "cnn";
  std::string loss;  // empty: the model file's, else what its output implies
  int epochs = 6;
  int batch_size = 128;  // global: split evenly over the workers
  std::string mode = "sync";
  std::string strategy = "parameter_server";
  std::string ring_codec = "fp32";
  int64_t ring_chunk_bytes = 1 << 20;
  // The optimizer: these flags, or where --optimizer is not given and the
  // --model file was compiled with one, that one with the flags given
  // (`given`) in its options' place.
  std::string optimizer = "adam";
  double learning_rate = 0.002;
  double lr_decay_rate = 0.5;
  int64_t lr_decay_steps = 1000;
  double momentum = 0.9;      // momentum; rmsprop's only when given (Keras's is 0)
  double weight_decay = -1;   // < 0: the optimizer's Keras default (adamw 0.004, else 0)
  double clipnorm = 0;        // 0: none
  double global_clipnorm = 0;  // 0: none
  std::set<std::string> given;  // the flags the command line sets (FlagsGiven)
  int replicas_to_aggregate = 0;
  int min_workers = 0;  // 0: every worker
  int min_ps = 0;       // 0: every ps, fixed
  int max_staleness = 8;
  uint64_t seed = 1;
  int64_t min_shard_bytes = 64 << 10;
  std::string push_codec = "fp32";
  std::string pull_codec = "fp32";
  double topk_fraction = 0.01;
  int64_t codec_min_elements = 1024;
  std::string transport = "auto";
  bool push_overlap = true;
  bool priority_pull = true;
  int num_ps = 0;       // 0: as TF_CONFIG lists
  int num_workers = 0;  // 0: as TF_CONFIG lists
  int wait_for_cluster_s = 120;
  double log_every_s = 2;
  std::string logdir;
  std::string export_path;  // empty: <logdir>/model.safetensors with a logdir
  std::string data_dir;
  double heartbeat_timeout_s = 3;
  int ps_recovery_timeout_s = 300;
  int ps_replicas = 0;  // at most kMaxPsReplicas
  std::string checkpoint_dir;  // empty: <logdir>/checkpoints with a logdir
  int64_t checkpoint_every_steps = 200;
  double checkpoint_every_secs = 0;
  int keep_checkpoints = 3;
  std::string async_lr_scaling = "sqrt";
  std::string nonfinite_gradients = "reject";
  // A weights file to start from (model/initial_weights.h), or "archive":
  // the --model .keras archive's own weights. Empty: the seeded
  // initializers.
  std::string initial_weights;
  // Sparse embedding tables (docs/sparse_embeddings.md).
  bool dense_embeddings = false;
  bool embedding_rows_ahead = true;  // next rows with the push-pull
  std::string embedding_optimizer;  // empty: --optimizer's per-row form
  double embedding_learning_rate = 0;  // 0: --learning_rate
  int embedding_admit_after = 1;
  int64_t embedding_evict_after = 0;
  bool embedding_unbounded = false;  // ids any int64 >= 0, input_dim ignored
  double embedding_initial_accumulator = 0.1;  // adagrad and ftrl, as Keras's
  // The tables' rate times embedding_lr_decay_rate^(update / steps); 0
  // steps: constant.
  double embedding_lr_decay_rate = 0.5;
  int64_t embedding_lr_decay_steps = 0;
  double embedding_l1 = 0;  // ftrl's l1_regularization_strength
  double embedding_l2 = 0;  // ftrl's l2_regularization_strength
};

// The options of a run of `config`'s cluster with `flags`. The first bad
// value, in the order of the checks, is InvalidArgument
// "--flag=value: reason" (or names TF_CONFIG's source where the cluster
// does not fit the strategy). Lines to warn about (a remainder of the
// global batch dropped) go to *warnings when it is not null. The data
// folder (--data_dir) is only copied, not checked. --initial_weights is
// read and checked against the model last (the largest read); without it,
// a --model .keras archive that holds weights is warned about.
absl::StatusOr<ChiefOptions> MakeChiefOptions(const ChiefFlags& flags, const TfConfig& config,
                                              std::vector<std::string>* warnings = nullptr);

// The optimizer and the options it uses, for the log: e.g. "rmsprop,
// learning_rate 0.003, rho 0.95, momentum 0.5, epsilon 1e-06, centered".
std::string DescribeOptimizer(const OptimizerConfig& o);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHIEF_FLAGS_H_
