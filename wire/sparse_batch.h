// SparseBatch: a worker's or an evaluator's side of the sparse embedding
// tables (docs/sparse_embeddings.md) for one batch at a time: the batch's
// ids renumbered into the tables' windows (model/sparse_layout.h), the
// rows of those ids pulled from the ps that hold them (RowOwner) into the
// windows of the flat parameter vector, and, after the step, the window's
// gradient rows gathered per ps for the push that follows.
//
// Used by one thread at a time.
#ifndef PSCLUSTER_WIRE_SPARSE_BATCH_H_
#define PSCLUSTER_WIRE_SPARSE_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/sparse_layout.h"
#include "proto/ps.pb.h"
#include "wire/ps_client.h"

namespace pscluster {

class SparseBatch {
 public:
  // `tables` as WithSparseTables left them (their window offsets set).
  SparseBatch(std::vector<SparseTableInfo> tables, int64_t window, int num_ps);

  // Renumbers the ids of `n` examples (of `example_size` floats) into
  // mapped() (InvalidArgument naming a bad id: the data's fault) and pulls
  // their rows, at version >= min_version of `generation` (-1: any), into
  // the windows of `params`. Errors of the pull as PsClient's.
  absl::Status Prepare(const float* examples, const ExampleIds& ids, int n,
                       int64_t example_size, PsClient* ps, int64_t min_version,
                       int64_t generation, absl::Duration timeout, float* params);
  // Prepare's first half only: the ids renumbered, nothing pulled. `ids`:
  // the examples' int64 ids, if any (RowWindow::Map).
  absl::Status Map(const float* examples, const ExampleIds& ids, int n, int64_t example_size);
  // Pulls the rows of the ids Map saw last into `params`.
  absl::Status Pull(PsClient* ps, int64_t min_version, int64_t generation,
                    absl::Duration timeout, float* params);
  // Pull in two halves, for rows that come with a push-pull's answer: the
  // ids Map saw last, per ps and table (PsClient::set_sparse_next), then
  // the rows taken from the answer (PsClient::TakeNextRows; false: not
  // there, Pull them), then written into the windows of `params`
  // (Internal when a ps sent rows of the wrong size).
  const std::vector<std::vector<SparseRows>>& pull_ids() const { return pull_; }
  bool TakeRowsFrom(PsClient* ps);
  absl::Status Scatter(float* params) const;

  // The examples with their ids renumbered (n x example_size floats).
  const std::vector<float>& mapped() const { return mapped_; }
  // Fills push() from the windows' gradient rows in `grads`.
  void GatherGradients(const float* grads);
  // Per ps, the sparse rows of its push (PsClient::set_sparse_push).
  const std::vector<std::vector<SparseRows>>& push() const { return push_; }

  // Distinct ids of the last batch over every table, and the bytes of
  // rows pulled so far (values and ids).
  int64_t last_rows() const { return last_rows_; }
  bool empty() const { return window_.tables().empty(); }

  // The ps in use changed (the chief's --min_ps): the ids Map saw last are
  // split again by RowOwner over `num_ps`, and any rows taken are dropped
  // (Pull them again).
  void SetNumPs(int num_ps);

 private:
  // pull_ and slot_ from the ids Map saw last, by RowOwner over num_ps_.
  void SplitByOwner();

  RowWindow window_;
  const int64_t rows_;  // window rows
  int num_ps_ = 0;
  std::vector<float> mapped_;
  // Per ps, per table: the ids it holds of the batch's, and each one's
  // row in the window.
  std::vector<std::vector<SparseRows>> pull_;
  std::vector<std::vector<std::vector<int64_t>>> slot_;
  std::vector<std::vector<SparseRows>> push_;
  std::vector<int64_t> row_versions_;
  int64_t last_rows_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_SPARSE_BATCH_H_
