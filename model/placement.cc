#include "model/placement.h"

#include <algorithm>
#include <cstring>

namespace pscluster {
namespace {

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

Placement PlaceVariables(const ModelSpec& spec, int num_ps,
                         const PlacementOptions& options) {
  Placement p;
  p.num_ps = num_ps;
  p.shards_of_ps.resize(num_ps);
  p.floats_of_ps.assign(num_ps, 0);
  uint64_t h = Fnv1a(1469598103934665603ull, spec.name.data(), spec.name.size());
  for (const VariableSpec& v : spec.variables) {
    // A sparse table's window: its rows live on every ps by RowOwner.
    if (v.table_rows != 0) continue;
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    const int64_t row_size = rows > 0 ? v.size / rows : 0;
    const int64_t bytes = v.size * static_cast<int64_t>(sizeof(float));
    int64_t parts = std::max<int64_t>(1, bytes / std::max<int64_t>(1, options.min_shard_bytes));
    parts = std::min<int64_t>({parts, num_ps, std::max<int64_t>(rows, 1)});
    int64_t row = 0;
    for (int64_t part = 0; part < parts; ++part) {
      // The first rows % parts pieces take one extra row.
      const int64_t n_rows = rows / parts + (part < rows % parts ? 1 : 0);
      Shard s;
      s.variable = v.name;
      s.part = static_cast<int>(part);
      s.num_parts = static_cast<int>(parts);
      s.offset = v.offset + row * row_size;
      s.size = n_rows * row_size;
      s.moving_statistic = v.role != VariableRole::kTrainable;
      s.momentum = v.momentum;
      row += n_rows;
      s.ps = static_cast<int>(std::min_element(p.floats_of_ps.begin(),
                                               p.floats_of_ps.end()) -
                              p.floats_of_ps.begin());
      p.floats_of_ps[s.ps] += s.size;
      p.shards_of_ps[s.ps].push_back(static_cast<int>(p.shards.size()));
      h = Fnv1a(h, s.variable.data(), s.variable.size());
      const int64_t fields[] = {s.part, s.offset, s.size, s.ps};
      h = Fnv1a(h, fields, sizeof(fields));
      p.shards.push_back(std::move(s));
    }
  }
  p.fingerprint = Fnv1a(h, &num_ps, sizeof(num_ps));
  return p;
}

void GatherForPs(const Placement& p, int ps, const float* flat, float* wire) {
  for (int i : p.shards_of_ps[ps]) {
    const Shard& s = p.shards[i];
    std::memcpy(wire, flat + s.offset, s.size * sizeof(float));
    wire += s.size;
  }
}

void ScatterFromPs(const Placement& p, int ps, const float* wire, float* flat) {
  for (int i : p.shards_of_ps[ps]) {
    const Shard& s = p.shards[i];
    std::memcpy(flat + s.offset, wire, s.size * sizeof(float));
    wire += s.size;
  }
}

}  // namespace pscluster
