#include "model/loss.h"

namespace pscluster {

const char* LossName(LossKind loss) {
  switch (loss) {
    case LossKind::kSparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
    case LossKind::kCategoricalCrossentropy: return "categorical_crossentropy";
    case LossKind::kBinaryCrossentropy: return "binary_crossentropy";
    case LossKind::kMeanSquaredError: return "mean_squared_error";
    case LossKind::kMeanAbsoluteError: return "mean_absolute_error";
  }
  return "?";
}

}  // namespace pscluster
