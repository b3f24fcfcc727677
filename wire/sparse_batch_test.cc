#include "wire/sparse_batch.h"

#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// One table of 1,000 rows of width 2, read from each example's 4 floats.
std::vector<SparseTableInfo> OneTable() {
  SparseTableInfo t;
  t.variable = "embedding/embeddings";
  t.width = 2;
  t.input_dim = 1000;
  t.columns = {{0, 4}};
  return {t};
}

// Per ps, the ids it is asked for; each must be that ps's by RowOwner.
std::set<int64_t> CheckSplit(const SparseBatch& b, int num_ps) {
  std::set<int64_t> all;
  EXPECT_EQ(b.pull_ids().size(), static_cast<size_t>(num_ps));
  for (int p = 0; p < static_cast<int>(b.pull_ids().size()); ++p) {
    for (int64_t id : b.pull_ids()[p][0].ids()) {
      EXPECT_EQ(RowOwner(0, id, num_ps), p) << id;
      EXPECT_TRUE(all.insert(id).second) << id << " asked of two ps";
    }
  }
  return all;
}

TEST(SparseBatchTest, SetNumPsSplitsTheLastBatchsIdsOverTheNewCount) {
  SparseBatch batch(OneTable(), /*window=*/12, /*num_ps=*/2);
  batch.SetNumPs(3);  // before any batch: nothing to split
  for (const auto& tables : batch.pull_ids()) EXPECT_EQ(tables[0].ids_size(), 0);
  batch.SetNumPs(2);
  const std::vector<float> examples = {3, 17, 256, 3, 999, 41, 17, 8, 5, 6, 7, 256};
  ASSERT_TRUE(batch.Map(examples.data(), ExampleIds{}, 3, 4).ok());
  const std::set<int64_t> ids = {3, 17, 256, 999, 41, 8, 5, 6, 7};
  EXPECT_EQ(CheckSplit(batch, 2), ids);
  const std::vector<float> mapped = batch.mapped();
  for (int num_ps : {3, 1, 4}) {
    batch.SetNumPs(num_ps);
    EXPECT_EQ(CheckSplit(batch, num_ps), ids) << num_ps;
    EXPECT_EQ(batch.mapped(), mapped);  // the examples' numbering is kept
    EXPECT_EQ(batch.last_rows(), 9);
    // Each ps's gradient rows are those of its ids: window row k holds
    // k's gradient, and the example that read id 3 reads row mapped[0].
    std::vector<float> grads(12 * 2);
    for (int k = 0; k < 12; ++k) grads[2 * k] = grads[2 * k + 1] = static_cast<float>(k);
    batch.GatherGradients(grads.data());
    ASSERT_EQ(batch.push().size(), static_cast<size_t>(num_ps));
    for (int p = 0; p < num_ps; ++p) {
      const SparseRows& rows = batch.push()[p][0];
      ASSERT_EQ(rows.ids_size(), batch.pull_ids()[p][0].ids_size());
      ASSERT_EQ(rows.values().size(), rows.ids_size() * 2 * sizeof(float));
      for (int i = 0; i < rows.ids_size(); ++i) {
        EXPECT_EQ(rows.ids(i), batch.pull_ids()[p][0].ids(i));
        float row = 0;
        std::memcpy(&row, rows.values().data() + i * 2 * sizeof(float), sizeof row);
        // The row the examples read for this id.
        for (size_t e = 0; e < examples.size(); ++e) {
          if (examples[e] == static_cast<float>(rows.ids(i))) EXPECT_EQ(mapped[e], row) << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pscluster
