#include "model/placement.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace pscluster {
namespace {

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The variables' pieces in model order, each at most `max_parts` per
// variable, every `ps` still 0.
std::vector<Shard> CutVariables(const ModelSpec& spec, int64_t max_parts,
                                const PlacementOptions& options) {
  std::vector<Shard> out;
  for (const VariableSpec& v : spec.variables) {
    // A sparse table's window: its rows live on every ps by RowOwner.
    if (v.table_rows != 0) continue;
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    const int64_t row_size = rows > 0 ? v.size / rows : 0;
    const int64_t bytes = v.size * static_cast<int64_t>(sizeof(float));
    int64_t parts = std::max<int64_t>(1, bytes / std::max<int64_t>(1, options.min_shard_bytes));
    parts = std::min<int64_t>({parts, max_parts, std::max<int64_t>(rows, 1)});
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
      out.push_back(std::move(s));
    }
  }
  return out;
}

// The elastic placement over num_ps: ps k takes, from the ps before it,
// most loaded first, the largest piece that leaves the two closer than
// they were, until none does. Each move lowers the sum of the squared
// loads, so it ends.
void PlaceElastic(int num_ps, std::vector<Shard>* shards, std::vector<int64_t>* load) {
  for (const Shard& s : *shards) (*load)[0] += s.size;
  std::vector<int> by_load(num_ps);
  for (int k = 1; k < num_ps; ++k) {
    for (;;) {
      by_load.resize(k);
      std::iota(by_load.begin(), by_load.end(), 0);
      std::stable_sort(by_load.begin(), by_load.end(),
                       [&](int a, int b) { return (*load)[a] > (*load)[b]; });
      Shard* take = nullptr;
      for (int from : by_load) {
        const int64_t gap = (*load)[from] - (*load)[k];
        for (Shard& s : *shards) {
          if (s.ps == from && s.size < gap && (take == nullptr || s.size > take->size)) take = &s;
        }
        if (take != nullptr) break;
      }
      if (take == nullptr) break;
      (*load)[take->ps] -= take->size;
      (*load)[k] += take->size;
      take->ps = k;
    }
  }
}

}  // namespace

Placement PlaceVariables(const ModelSpec& spec, int num_ps, const PlacementOptions& options) {
  Placement p;
  p.num_ps = num_ps;
  p.max_ps = options.max_ps > 0 ? std::max(options.max_ps, num_ps) : 0;
  p.floats_of_ps.assign(num_ps, 0);
  p.shards_of_ps.resize(num_ps);
  if (p.max_ps > 0) {
    p.shards = CutVariables(spec, int64_t{kElasticPiecesPerPs} * p.max_ps, options);
    PlaceElastic(num_ps, &p.shards, &p.floats_of_ps);
  } else {
    p.shards = CutVariables(spec, num_ps, options);
    for (Shard& s : p.shards) {
      s.ps = static_cast<int>(std::min_element(p.floats_of_ps.begin(), p.floats_of_ps.end()) -
                              p.floats_of_ps.begin());
      p.floats_of_ps[s.ps] += s.size;
    }
  }
  uint64_t h = Fnv1a(1469598103934665603ull, spec.name.data(), spec.name.size());
  for (size_t i = 0; i < p.shards.size(); ++i) {
    const Shard& s = p.shards[i];
    p.shards_of_ps[s.ps].push_back(static_cast<int>(i));
    h = Fnv1a(h, s.variable.data(), s.variable.size());
    const int64_t fields[] = {s.part, s.offset, s.size, s.ps};
    h = Fnv1a(h, fields, sizeof(fields));
  }
  p.fingerprint = Fnv1a(h, &num_ps, sizeof(num_ps));
  return p;
}

int64_t MovedFloats(const Placement& from, const Placement& to) {
  auto by_offset = [](const Placement& p) {
    std::vector<Shard> s = p.shards;
    std::sort(s.begin(), s.end(),
              [](const Shard& a, const Shard& b) { return a.offset < b.offset; });
    return s;
  };
  const std::vector<Shard> a = by_offset(from);
  const std::vector<Shard> b = by_offset(to);
  int64_t moved = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const int64_t lo = std::max(a[i].offset, b[j].offset);
    const int64_t hi = std::min(a[i].offset + a[i].size, b[j].offset + b[j].size);
    if (hi > lo && a[i].ps != b[j].ps) moved += hi - lo;
    (a[i].offset + a[i].size <= b[j].offset + b[j].size) ? ++i : ++j;
  }
  return moved;
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
