// The chief's own evaluation of the final weights, for a cluster without an
// evaluator when the chief is given --data_dir: the MNIST test set scored
// exactly as the evaluator scores it (worker/test_scoring.h), on the CPU
// backend. A plain function, safe to call from any thread; `params` is
// borrowed for the call.
#ifndef PSCLUSTER_CHIEF_TEST_EVALUATION_H_
#define PSCLUSTER_CHIEF_TEST_EVALUATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/model_spec.h"

namespace pscluster {

struct TestScore {
  double accuracy = 0;
  double loss = 0;  // mean cross-entropy
  int examples = 0;
};

// Loads "<data_dir>/t10k-*" (common/idx_dataset.h LoadMnist, whose errors
// name the files) and scores `params` (spec.num_parameters floats, the flat
// model layout) with `threads` CPU threads.
absl::StatusOr<TestScore> EvaluateOnTestSet(const ModelSpec& spec, const float* params,
                                            const std::string& data_dir, int threads = 1);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_TEST_EVALUATION_H_
