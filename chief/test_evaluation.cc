#include "chief/test_evaluation.h"

#include <memory>

#include "common/dataset.h"
#include "common/idx_dataset.h"
#include "worker/compute_backend.h"
#include "worker/cpu_backend.h"
#include "worker/test_scoring.h"

namespace pscluster {

absl::StatusOr<TestScore> EvaluateOnTestSet(const ModelSpec& spec, const float* params,
                                            const std::string& data_dir, int threads) {
  absl::StatusOr<Dataset> test = LoadDataset(data_dir, Split::kTest);
  if (!test.ok()) return test.status();
  if (absl::Status s = CheckDatasetFitsModel(*test, data_dir, spec); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend =
      CreateCpuBackend(spec, kScoringBatch, threads);
  if (!backend.ok()) return backend.status();
  TestScore score;
  score.examples = test->count;
  if (absl::Status s = ScoreOnDataset(**backend, params, *test, &score.accuracy, &score.loss);
      !s.ok()) {
    return s;
  }
  return score;
}

}  // namespace pscluster
