#include "update/sparse_shards.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "update/parameter_store.h"
#include "update/pending_step.h"

namespace pscluster {

void SparseShards::Reset(std::vector<std::unique_ptr<SparseTable>> tables) {
  tables_ = std::move(tables);
  step_.clear();
}

absl::Status SparseShards::CheckTable(int table) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse table ", table, " does not exist; the model has ", tables_.size()));
  }
  return absl::OkStatus();
}

absl::Status SparseShards::Check(const std::vector<SparseRowsData>& rows, bool* finite) const {
  *finite = true;
  std::vector<bool> seen(tables_.size(), false);
  for (const SparseRowsData& r : rows) {
    PSCLUSTER_RETURN_IF_ERROR(CheckTable(r.table));
    if (seen[r.table]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", r.table, " comes twice in one push"));
    }
    seen[r.table] = true;
    const SparseTable& table = *tables_[r.table];
    if (r.values.size() != r.ids.size() * table.width()) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table ", r.table, ": ",
                                                     r.values.size(), " values for ", r.ids.size(),
                                                     " rows of ", table.width()));
    }
    PSCLUSTER_RETURN_IF_ERROR(table.CheckIds(r.ids));
    absl::flat_hash_set<int64_t> distinct(r.ids.begin(), r.ids.end());
    if (distinct.size() != r.ids.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", r.table, ": an id comes twice in one push"));
    }
    *finite = *finite && AllFinite(r.values.data(), static_cast<int64_t>(r.values.size()));
  }
  return absl::OkStatus();
}

absl::Status SparseShards::Read(std::vector<SparseRowsData>* rows) const {
  for (SparseRowsData& r : *rows) {
    PSCLUSTER_RETURN_IF_ERROR(CheckTable(r.table));
    const SparseTable& table = *tables_[r.table];
    PSCLUSTER_RETURN_IF_ERROR(table.CheckIds(r.ids));
    r.values.resize(r.ids.size() * table.width());
    table.Read(r.ids, r.values.data());
  }
  return absl::OkStatus();
}

void SparseShards::SumStep(const PendingStep& pending, const std::vector<bool>& members) {
  step_.clear();
  if (tables_.empty()) return;
  int64_t total = 0;
  for (size_t w = 0; w < members.size(); ++w) {
    if (members[w]) total += pending.examples(static_cast<int>(w));
  }
  // As PendingStep::Gradient sums the dense gradient: in (chunk, worker)
  // order, each term rounded before it is added, a lone member's rows
  // taken as they are.
  const std::vector<int> order = pending.SumOrder(members);
  step_.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) step_[t].table = static_cast<int>(t);
  std::vector<absl::flat_hash_map<int64_t, int64_t>> index(tables_.size());
  for (int w : order) {
    const float weight = static_cast<float>(pending.examples(w)) / total;
    for (const SparseRowsData& r : pending.sparse(w)) {
      SparseRowsData& out = step_[r.table];
      const int width = tables_[r.table]->width();
      for (size_t i = 0; i < r.ids.size(); ++i) {
        const float* g = r.values.data() + i * width;
        auto [it, added] = index[r.table].try_emplace(r.ids[i], out.ids.size());
        if (added) {
          out.ids.push_back(r.ids[i]);
          out.values.resize(out.values.size() + width);
        }
        float* sum = out.values.data() + it->second * width;
        for (int j = 0; j < width; ++j) {
          if (order.size() == 1) {
            sum[j] = g[j];
          } else if (added) {
            sum[j] = weight * g[j] + 0.0f;
          } else {
            sum[j] += weight * g[j];
          }
        }
      }
    }
  }
  step_.erase(std::remove_if(step_.begin(), step_.end(),
                             [](const SparseRowsData& r) { return r.ids.empty(); }),
              step_.end());
}

void SparseShards::SetStep(std::vector<SparseRowsData> rows) { step_ = std::move(rows); }

std::vector<SparseRowsData> SparseShards::TakeStep() {
  std::vector<SparseRowsData> step = std::move(step_);
  step_.clear();
  return step;
}

void SparseShards::Apply(int64_t version) {
  for (const SparseRowsData& r : step_) {
    if (!r.ids.empty()) tables_[r.table]->Apply(r.ids, r.values.data(), version);
  }
  if ((version + 1) % kEvictEvery == 0) {
    for (std::unique_ptr<SparseTable>& t : tables_) t->Evict(version + 1);
  }
}

std::vector<SparseTable::Rows> SparseShards::Export() const {
  std::vector<SparseTable::Rows> out;
  for (const std::unique_ptr<SparseTable>& t : tables_) out.push_back(t->Export());
  return out;
}

std::vector<SparseTableStats> SparseShards::stats() const {
  std::vector<SparseTableStats> out;
  for (const std::unique_ptr<SparseTable>& t : tables_) out.push_back(t->stats());
  return out;
}

}  // namespace pscluster
