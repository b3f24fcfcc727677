#include "compute/scoring.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compute/cpu_backend.h"
#include "model/dataset.h"

namespace pscluster {

absl::Status ScoreOnDataset(ComputeBackend& backend, const ModelSpec& spec, const float* params,
                            const Dataset& data, TestScore* score) {
  if (data.count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot score on an empty data set (", data.count, " examples)"));
  }
  const size_t pixels = size_t(data.height) * data.width * data.channels;
  const bool binary = spec.loss == LossKind::kBinaryCrossentropy;
  const int outputs = spec.num_classes;
  std::vector<float> probabilities, scores, labels;
  if (binary) probabilities.resize(size_t(kScoringBatch) * outputs);
  double loss_sum = 0;
  int64_t correct = 0;
  for (int begin = 0; begin < data.count; begin += kScoringBatch) {
    const int n = std::min(kScoringBatch, data.count - begin);
    double batch_loss = 0;
    int batch_correct = 0;
    const float* targets = &data.targets[begin * int64_t{data.targets_per_example}];
    const Batch b{&data.images[begin * pixels], targets, n};
    if (absl::Status s = backend.Evaluate(params, b, &batch_loss, &batch_correct,
                                          binary ? probabilities.data() : nullptr);
        !s.ok()) {
      return s;
    }
    loss_sum += batch_loss;
    correct += batch_correct;
    if (binary) {
      scores.insert(scores.end(), probabilities.begin(), probabilities.begin() + n * outputs);
      labels.insert(labels.end(), targets, targets + n * outputs);
    }
  }
  TestScore out;
  out.examples = data.count;
  out.loss = loss_sum / data.count;
  const bool regression = spec.loss == LossKind::kMeanSquaredError ||
                          spec.loss == LossKind::kMeanAbsoluteError;
  out.accuracy = regression ? 0.0
                            : double(correct) / (double(data.count) * (binary ? outputs : 1));
  if (binary) out.auc = RocAuc(scores, labels);
  *score = out;
  return absl::OkStatus();
}

std::string MetricsText(LossKind loss, double accuracy, double auc, double mean_loss,
                        const std::string& prefix) {
  switch (loss) {
    case LossKind::kMeanSquaredError:
      return absl::StrFormat("%smse=%.4f %sloss=%.4f", prefix, mean_loss, prefix, mean_loss);
    case LossKind::kMeanAbsoluteError:
      return absl::StrFormat("%smae=%.4f %sloss=%.4f", prefix, mean_loss, prefix, mean_loss);
    case LossKind::kBinaryCrossentropy:
      return absl::StrFormat("%saccuracy=%.4f %sauc=%.4f %sloss=%.4f", prefix, accuracy, prefix,
                             auc, prefix, mean_loss);
    default:
      return absl::StrFormat("%saccuracy=%.4f %sloss=%.4f", prefix, accuracy, prefix, mean_loss);
  }
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
  if (absl::Status s = ScoreOnDataset(**backend, spec, params, *test, &score); !s.ok()) return s;
  return score;
}

}  // namespace pscluster
