// Scoring a model's weights on a labelled data set: accuracy and mean loss
// over every example. The evaluator and the chief's own final evaluation
// (when no evaluator is in the cluster) both use it, so the two count the
// same way. Plain functions; ScoreOnDataset's thread-safety is the
// backend's (one call at a time), ScoreTestSet is safe from any thread.
// Every argument is borrowed for the call.
#ifndef PSCLUSTER_COMPUTE_SCORING_H_
#define PSCLUSTER_COMPUTE_SCORING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"
#include "model/roc_auc.h"  // RocAuc, for the binary losses' AUC

namespace pscluster {

// Examples per ComputeBackend::Evaluate call: the backend must have been
// created for batches of at least this many (BackendOptions::max_batch).
inline constexpr int kScoringBatch = 500;

// One output's metrics, in a model with several: its loss's, as TestScore
// (accuracy, AUC for binary cross-entropy), its mean loss recomputed from
// its predicted probabilities (or values).
struct OutputScore {
  std::string name;
  LossKind kind = LossKind::kBinaryCrossentropy;
  double accuracy = 0;
  double loss = 0;
  double auc = -1;
};

// What a model's weights score on a labelled data set; the metrics of the
// model's loss (model/loss.h), as Keras reports them.
struct TestScore {
  // Categorical: right arg-max predictions / examples; binary: outputs on
  // the right side of 0.5 / (examples * outputs) (binary accuracy);
  // regression: 0 (the loss is the metric).
  double accuracy = 0;
  double loss = 0;  // the mean loss (for regression: the MSE or MAE)
  double auc = -1;  // binary: the ROC AUC over every output; else -1
  int examples = 0;
  // Several outputs: each one's (then `loss` is the weighted sum of their
  // losses, as Keras's, and accuracy and auc are unused).
  std::vector<OutputScore> outputs;
};

// Runs `params` (the flat model layout of `spec`) forward over `data` in
// batches of kScoringBatch into *score. InvalidArgument for an empty data
// set; the backend's error otherwise, with nothing written.
absl::Status ScoreOnDataset(ComputeBackend& backend, const ModelSpec& spec, const float* params,
                            const Dataset& data, TestScore* score);

// The metrics as a line's fields, "<prefix>accuracy=0.9912 <prefix>loss=0.0290"
// (binary: with "<prefix>auc="; regression: "<prefix>mse=" or "<prefix>mae="
// for the accuracy).
std::string MetricsText(LossKind loss, double accuracy, double auc, double mean_loss,
                        const std::string& prefix);

// MetricsText of a score of `spec`'s model: with several outputs, the
// total "<prefix>loss=" then each output's metrics, its fields named
// "<prefix><output>_accuracy=", "<prefix><output>_auc=", ...
std::string ScoreText(LossKind loss, double accuracy, double auc, double mean_loss,
                      const std::vector<OutputScore>& outputs, const std::string& prefix);

// The chief's own evaluation of the final weights, for a cluster without an
// evaluator: loads the test split of `data_dir` (model/dataset.h, whose
// errors name the files) and scores `params` (spec.num_parameters floats,
// the flat model layout) exactly as the evaluator does, on the CPU backend
// with `threads` threads. Sparse tables as the evaluator reads them when
// the data has int64 ids or a table is unbounded (its rows that exist,
// VariableSpec::row_ids): the test set's ids renumbered into a window of
// their rows, an id without a row reading its initial values
// (InitialRow with `seed`, as a ps makes them). InvalidArgument naming the
// id when one is outside a bounded table.
absl::StatusOr<TestScore> ScoreTestSet(const ModelSpec& spec, const float* params,
                                       const std::string& data_dir, int threads = 1,
                                       uint64_t seed = 0);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_SCORING_H_
