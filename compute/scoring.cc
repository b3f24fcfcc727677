#include "compute/scoring.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "compute/cpu_backend.h"
#include "model/dataset.h"

namespace pscluster {

absl::Status ScoreOnDataset(ComputeBackend& backend, const float* params, const Dataset& data,
                            double* accuracy, double* loss) {
  if (data.count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot score on an empty data set (", data.count, " examples)"));
  }
  const size_t pixels = size_t(data.height) * data.width * data.channels;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int begin = 0; begin < data.count; begin += kScoringBatch) {
    const int n = std::min(kScoringBatch, data.count - begin);
    double batch_loss = 0;
    int batch_correct = 0;
    const Batch b{&data.images[begin * pixels], &data.labels[begin], n};
    if (absl::Status s = backend.Evaluate(params, b, &batch_loss, &batch_correct); !s.ok()) {
      return s;
    }
    loss_sum += batch_loss;
    correct += batch_correct;
  }
  *accuracy = double(correct) / data.count;
  *loss = loss_sum / data.count;
  return absl::OkStatus();
}

absl::StatusOr<TestScore> ScoreTestSet(const ModelSpec& spec, const float* params,
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
