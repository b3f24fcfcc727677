#include "wire/sparse_batch.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pscluster {

SparseBatch::SparseBatch(std::vector<SparseTableInfo> tables, int64_t window, int num_ps)
    : window_(std::move(tables)), rows_(window) {
  SetNumPs(num_ps);
}

void SparseBatch::SetNumPs(int num_ps) {
  num_ps_ = num_ps;
  const size_t n = window_.tables().size();
  pull_.assign(num_ps, std::vector<SparseRows>(n));
  push_.assign(num_ps, std::vector<SparseRows>(n));
  slot_.assign(num_ps, std::vector<std::vector<int64_t>>(n));
  for (int p = 0; p < num_ps; ++p) {
    for (size_t t = 0; t < n; ++t) {
      pull_[p][t].set_table(static_cast<int>(t));
      push_[p][t].set_table(static_cast<int>(t));
    }
  }
  SplitByOwner();
}

absl::Status SparseBatch::Map(const float* examples, const ExampleIds& ids, int n,
                              int64_t example_size) {
  if (absl::Status s = window_.Map(examples, ids, n, example_size, rows_, &mapped_); !s.ok()) {
    return s;
  }
  SplitByOwner();
  return absl::OkStatus();
}

void SparseBatch::SplitByOwner() {
  last_rows_ = 0;
  for (size_t t = 0; t < window_.tables().size(); ++t) {
    for (int p = 0; p < num_ps_; ++p) {
      pull_[p][t].clear_ids();
      slot_[p][t].clear();
    }
    const std::vector<int64_t>& ids = window_.ids(static_cast<int>(t));
    last_rows_ += static_cast<int64_t>(ids.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      const int p = RowOwner(static_cast<int>(t), ids[k], num_ps_);
      pull_[p][t].add_ids(ids[k]);
      slot_[p][t].push_back(static_cast<int64_t>(k));
    }
  }
}

absl::Status SparseBatch::Pull(PsClient* ps, int64_t min_version, int64_t generation,
                               absl::Duration timeout, float* params) {
  if (absl::Status s = ps->PullRowsAll(min_version, generation, &pull_, timeout, &row_versions_);
      !s.ok()) {
    return s;
  }
  return Scatter(params);
}

bool SparseBatch::TakeRowsFrom(PsClient* ps) { return ps->TakeNextRows(&pull_); }

absl::Status SparseBatch::Scatter(float* params) const {
  for (int p = 0; p < num_ps_; ++p) {
    for (size_t t = 0; t < pull_[p].size(); ++t) {
      const SparseTableInfo& table = window_.tables()[t];
      const std::string& v = pull_[p][t].values();
      const std::vector<int64_t>& slots = slot_[p][t];
      const size_t row_bytes = static_cast<size_t>(table.width) * sizeof(float);
      if (v.size() != slots.size() * row_bytes) {
        return absl::InternalError(absl::StrCat("ps ", p, " sent ", v.size(), " bytes of ",
                                                slots.size(), " rows of table ",
                                                table.variable));
      }
      for (size_t k = 0; k < slots.size(); ++k) {
        std::memcpy(params + table.offset + slots[k] * table.width, v.data() + k * row_bytes,
                    row_bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SparseBatch::Prepare(const float* examples, const ExampleIds& ids, int n,
                                  int64_t example_size, PsClient* ps, int64_t min_version,
                                  int64_t generation, absl::Duration timeout, float* params) {
  PSCLUSTER_RETURN_IF_ERROR(Map(examples, ids, n, example_size));
  return Pull(ps, min_version, generation, timeout, params);
}

void SparseBatch::GatherGradients(const float* grads) {
  for (int p = 0; p < num_ps_; ++p) {
    for (size_t t = 0; t < push_[p].size(); ++t) {
      const SparseTableInfo& table = window_.tables()[t];
      SparseRows& out = push_[p][t];
      *out.mutable_ids() = pull_[p][t].ids();
      const std::vector<int64_t>& slots = slot_[p][t];
      const size_t row_bytes = static_cast<size_t>(table.width) * sizeof(float);
      std::string* v = out.mutable_values();
      v->resize(slots.size() * row_bytes);
      for (size_t k = 0; k < slots.size(); ++k) {
        std::memcpy(v->data() + k * row_bytes, grads + table.offset + slots[k] * table.width,
                    row_bytes);
      }
    }
  }
}

}  // namespace pscluster
