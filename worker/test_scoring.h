// Scoring a model's weights on a labelled data set: accuracy and mean loss
// over every example. The evaluator and the chief's own final evaluation
// (when no evaluator is in the cluster) both use it, so the two count the
// same way. A plain function; thread-safety as the backend's (one call at a
// time). Every argument is borrowed for the call.
#ifndef PSCLUSTER_WORKER_TEST_SCORING_H_
#define PSCLUSTER_WORKER_TEST_SCORING_H_

#include "absl/status/status.h"
#include "common/idx_dataset.h"
#include "worker/compute_backend.h"

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

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_TEST_SCORING_H_
