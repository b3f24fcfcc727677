// The exact area under the ROC curve of a binary classifier's scores: the
// evaluator's and the chief's test-set AUC (compute/scoring.h) and the
// planted model's own AUC in the Criteo generator (model/criteo_synth.h)
// count the same way. A pure function; thread-safe.
#ifndef PSCLUSTER_MODEL_ROC_AUC_H_
#define PSCLUSTER_MODEL_ROC_AUC_H_

#include <vector>

namespace pscluster {

// The exact ROC AUC of `scores` against labels (positive: >= 0.5), ties
// counted half (the Mann-Whitney U statistic); -1 without both classes.
// Keras's AUC metric approximates it with 200 thresholds. O(n log n).
double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_ROC_AUC_H_
