#include "compute/gradient_layout.h"

#include <algorithm>
#include <map>

namespace pscluster {

GradientLayout PlanGradientLayout(const ModelSpec& spec,
                                  const std::vector<std::vector<int64_t>>& variable_offsets) {
  std::map<int64_t, int64_t> size_at;
  for (const VariableSpec& v : spec.variables) size_at[v.offset] = v.size;
  GradientLayout layout;
  int64_t below = 0;  // the end of the variables of the ops so far
  for (const std::vector<int64_t>& offsets : variable_offsets) {
    layout.final_from.push_back(below);
    std::vector<std::pair<int64_t, int64_t>>& ranges = layout.ranges.emplace_back();
    for (int64_t offset : offsets) {
      if (offset < 0) continue;
      ranges.emplace_back(offset, offset + size_at[offset]);
      below = std::max(below, ranges.back().second);
    }
    layout.params_to.push_back(below);
  }
  return layout;
}

}  // namespace pscluster
