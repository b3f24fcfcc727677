#include "chief/weights_export.h"

#include <cstdlib>
#include <map>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

TEST(WeightsExportTest, OneTensorPerVariableInTheModelsOrderAndLayout) {
  const ModelSpec spec = *ModelByName("cnn");
  std::vector<float> flat(spec.num_parameters);
  std::iota(flat.begin(), flat.end(), 0.0f);
  const std::string path = TempPath("cnn.safetensors");
  ASSERT_TRUE(ExportWeights(path, spec, flat, 469, 1, 0.9825).ok());

  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<NamedTensor>> back = ReadSafetensors(path, &meta);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), spec.variables.size());
  for (size_t i = 0; i < spec.variables.size(); ++i) {
    const VariableSpec& v = spec.variables[i];
    const NamedTensor& t = (*back)[i];
    EXPECT_EQ(t.name, v.name);
    EXPECT_EQ(t.shape, v.shape) << v.name;
    ASSERT_EQ(static_cast<int64_t>(t.values.size()), v.size) << v.name;
    EXPECT_EQ(t.values.front(), static_cast<float>(v.offset)) << v.name;
    EXPECT_EQ(t.values.back(), static_cast<float>(v.offset + v.size - 1)) << v.name;
  }
  EXPECT_EQ(meta["model"], "cnn");
  EXPECT_EQ(meta["steps"], "469");
  EXPECT_EQ(meta["epochs"], "1");
  EXPECT_EQ(meta["layout"], "keras");
  EXPECT_EQ(meta["test_accuracy"], "0.9825");
}

// An unbounded table (its rows that exist, VariableSpec::row_ids) is
// followed by its rows' ids, int64, as "<variable>/ids".
TEST(WeightsExportTest, AnUnboundedTableCarriesItsRowsIds) {
  ModelSpec spec = *ModelByName("mlp");
  VariableSpec& table = spec.variables[0];
  table.table_rows = kUnboundedTable;
  for (int64_t k = 0; k < table.shape[0]; ++k) table.row_ids.push_back((k << 40) + 7);
  std::vector<float> flat(spec.num_parameters);
  std::iota(flat.begin(), flat.end(), 0.0f);
  const std::string path = TempPath("unbounded.safetensors");
  ASSERT_TRUE(ExportWeights(path, spec, flat, 3, 1, std::nullopt).ok());
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<NamedTensor>> back = ReadSafetensors(path, &meta);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), spec.variables.size() + 1);
  EXPECT_EQ((*back)[0].name, table.name);
  EXPECT_EQ((*back)[0].shape, table.shape);
  const NamedTensor& ids = (*back)[1];
  EXPECT_EQ(ids.name, table.name + "/ids");
  EXPECT_EQ(ids.dtype, NamedTensor::Dtype::kI64);
  EXPECT_EQ(ids.shape, std::vector<int64_t>{table.shape[0]});
  EXPECT_EQ(ids.ints, table.row_ids);
  EXPECT_EQ((*back)[2].name, spec.variables[1].name);
}

TEST(WeightsExportTest, NoAccuracyWithoutAnEvaluation) {
  const ModelSpec spec = *ModelByName("mlp");
  const std::string path = TempPath("mlp.safetensors");
  ASSERT_TRUE(
      ExportWeights(path, spec, std::vector<float>(spec.num_parameters), 3, 2, std::nullopt).ok());
  std::map<std::string, std::string> meta;
  ASSERT_TRUE(ReadSafetensors(path, &meta).ok());
  EXPECT_EQ(meta.count("test_accuracy"), 0u);
}

TEST(WeightsExportTest, AVectorOfAnotherSizeIsRefused) {
  const ModelSpec spec = *ModelByName("mlp");
  const std::string path = TempPath("short.safetensors");
  absl::Status s = ExportWeights(path, spec, std::vector<float>(10), 3, 2, std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("exporting ", path, ": 10 values for model mlp of ",
                                      spec.num_parameters, " parameters"));
}

}  // namespace
}  // namespace pscluster
