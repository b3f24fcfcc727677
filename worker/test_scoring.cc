#include "worker/test_scoring.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

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

}  // namespace pscluster
