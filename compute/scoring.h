// Scoring a model's weights on a labelled data set: accuracy and mean loss
// over every example. The evaluator and the chief's own final evaluation
// (when no evaluator is in the cluster) both use it, so the two count the
// same way. Plain functions; ScoreOnDataset's thread-safety is the
// backend's (one call at a time), ScoreTestSet is safe from any thread.
// Every argument is borrowed for the call.
#ifndef PSCLUSTER_COMPUTE_SCORING_H_
#define PSCLUSTER_COMPUTE_SCORING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"

namespace pscluster {

// Examples per ComputeBackend::Evaluate call: the backend must have been
// created for batches of at least this many (BackendOptions::max_batch).
inline constexpr int kScoringBatch = 500;

// Runs `params` (the flat model layout) forward over `data` in batches of
// kScoringBatch: *accuracy = correct arg-max predictions / examples,
// *loss = mean cross-entropy. InvalidArgument for an empty data set; the
// backend's error otherwise, with nothing written.
absl::Status ScoreOnDataset(ComputeBackend& backend, const float* params, const Dataset& data,
                            double* accuracy, double* loss);

struct TestScore {
  double accuracy = 0;
  double loss = 0;  // mean cross-entropy
  int examples = 0;
};

// The chief's own evaluation of the final weights, for a cluster without an
// evaluator: loads the test split of `data_dir` (model/dataset.h, whose
// errors name the files) and scores `params` (spec.num_parameters floats,
// the flat model layout) exactly as the evaluator does, on the CPU backend
// with `threads` threads.
absl::StatusOr<TestScore> ScoreTestSet(const ModelSpec& spec, const float* params,
                                       const std::string& data_dir, int threads = 1);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_SCORING_H_
