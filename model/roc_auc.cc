#include "model/roc_auc.h"

#include <algorithm>
#include <cstddef>

namespace pscluster {

double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positives = 0, rank_sum = 0;  // ranks from 1, ties averaged
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (double(i + 1) + double(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] >= 0.5f) {
        positives += 1;
        rank_sum += rank;
      }
    }
    i = j;
  }
  const double negatives = double(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return -1;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace pscluster
