#include "model/initial_weights.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kDir[] = "tests/fixtures/keras/";

ModelSpec Small() {
  absl::StatusOr<std::string> text = ReadModelFile(std::string(kDir) + "keras3_small.json");
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text.ok() ? *text : "", "keras3_small");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec();
}

// make_keras_weights.py's values: variable k's element i = (k + 1) + i / 4096.
std::vector<float> Expected(const ModelSpec& spec) {
  std::vector<float> flat(spec.num_parameters, -1.0f);
  for (size_t k = 0; k < spec.variables.size(); ++k) {
    const VariableSpec& v = spec.variables[k];
    for (int64_t i = 0; i < v.size; ++i) {
      flat[v.offset + i] = static_cast<float>((k + 1) + i / 4096.0);
    }
  }
  return flat;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(InitialWeightsTest, EveryKerasLayoutGivesEveryValueItsPlace) {
  const ModelSpec spec = Small();
  const std::vector<float> want = Expected(spec);
  for (const char* file : {"keras3_small.weights.h5", "keras3_small_trained.keras",
                           "keras3_small_named.weights.h5", "keras3_small_2_13.weights.h5",
                           "keras2_small.h5"}) {
    absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(std::string(kDir) + file, spec);
    ASSERT_TRUE(flat.ok()) << file << ": " << flat.status();
    EXPECT_EQ(*flat, want) << file;
  }
}

TEST(InitialWeightsTest, SafetensorsRoundTrip) {
  const ModelSpec spec = Small();
  std::vector<NamedTensor> tensors;
  const std::vector<float> want = Expected(spec);
  for (const VariableSpec& v : spec.variables) {
    tensors.push_back(
        {v.name, v.shape, std::vector<float>(want.begin() + v.offset,
                                             want.begin() + v.offset + v.size)});
  }
  const std::string path = TempPath("small.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(path, spec);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, want);
  // The same bytes under another name are found by their contents.
  const std::string other = TempPath("small.weights");
  testing::WriteAll(other, testing::ReadAll(path));
  flat = LoadInitialWeights(other, spec);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, want);
}

TEST(InitialWeightsTest, NamesEveryMismatch) {
  const ModelSpec spec = Small();
  const std::string path = std::string(kDir) + "keras3_small_bad.weights.h5";
  absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(path, spec);
  ASSERT_TRUE(absl::IsInvalidArgument(flat.status())) << flat.status();
  const std::string m(flat.status().message());
  EXPECT_THAT(m, HasSubstr(path + ": 5 mismatches with model 'keras3_small'")) << m;
  EXPECT_THAT(m, HasSubstr("variable 'conv_a/kernel' is float64 in the file "
                           "(layers/conv2d/vars/0); float32 is needed"));
  EXPECT_THAT(m, HasSubstr("variable 'fc/kernel' has shape [64, 32] in the model but [64, 16] "
                           "in the file (layers/dense/vars/0)"));
  EXPECT_THAT(m, HasSubstr("variable 'out/bias' [10] is absent from the file"));
  EXPECT_THAT(m, HasSubstr("file tensor layers/dense_2/vars/0 [5] is no variable's"));
  EXPECT_THAT(m, HasSubstr("file tensor layers/batch_normalization/vars/4 [8] is no variable's"));
}

TEST(InitialWeightsTest, WeightsOfAnotherModelAreRefused) {
  // The small model's weights for the built-in mlp: nothing fits.
  absl::StatusOr<std::string> mlp_json = ReadModelFile("mlp");
  ASSERT_TRUE(mlp_json.ok());
  absl::StatusOr<ModelSpec> mlp = ParseKerasModel(*mlp_json, "mlp");
  ASSERT_TRUE(mlp.ok());
  absl::StatusOr<std::vector<float>> flat =
      LoadInitialWeights(std::string(kDir) + "keras2_small.h5", *mlp);
  ASSERT_TRUE(absl::IsInvalidArgument(flat.status())) << flat.status();
  const std::string m(flat.status().message());
  EXPECT_THAT(m, HasSubstr("with model 'mlp'"));
  EXPECT_THAT(m, HasSubstr("is for 'conv_a/kernel', which the model lacks"));
  EXPECT_THAT(m, HasSubstr("is absent from the file"));
}

TEST(InitialWeightsTest, FlattenNamesDuplicatesAndValueCounts) {
  const ModelSpec spec = Small();
  std::vector<FileTensor> tensors;
  const std::vector<float> want = Expected(spec);
  for (const VariableSpec& v : spec.variables) {
    tensors.push_back({v.name, "tensor '" + v.name + "'", v.shape, "float32",
                       std::vector<float>(want.begin() + v.offset,
                                          want.begin() + v.offset + v.size)});
  }
  absl::StatusOr<std::vector<float>> flat = FlattenWeights(tensors, spec, "mem");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, want);
  tensors.push_back(tensors[1]);
  tensors.back().where = "again";
  tensors[0].values.pop_back();
  flat = FlattenWeights(tensors, spec, "mem");
  ASSERT_TRUE(absl::IsInvalidArgument(flat.status()));
  const std::string m(flat.status().message());
  EXPECT_THAT(m, HasSubstr("mem: 2 mismatches"));
  EXPECT_THAT(m, HasSubstr("variable 'conv_a/bias' is in the file twice (tensor 'conv_a/bias' "
                           "and again)"));
  EXPECT_THAT(m, HasSubstr("variable 'conv_a/kernel': 71 values in the file"));
  EXPECT_THAT(m, Not(HasSubstr("fc/")));
}

TEST(InitialWeightsTest, UnreadableFilesAreNamed) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<float>> flat = LoadInitialWeights("/nonexistent/w.safetensors", spec);
  EXPECT_TRUE(absl::IsNotFound(flat.status())) << flat.status();
  flat = LoadInitialWeights("/nonexistent/w", spec);
  EXPECT_TRUE(absl::IsNotFound(flat.status())) << flat.status();
  flat = LoadInitialWeights(std::string(kDir) + "keras3_small.json", spec);
  EXPECT_TRUE(absl::IsInvalidArgument(flat.status())) << flat.status();
  EXPECT_THAT(flat.status().message(), HasSubstr("keras3_small.json"));
  // A safetensors file of float64 values: the dtype is named.
  const std::string f64 = TempPath("f64.safetensors");
  const std::string header = R"({"conv_a/kernel":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  testing::WriteAll(f64, bytes + header + std::string(8, '\0'));
  flat = LoadInitialWeights(f64, spec);
  EXPECT_TRUE(absl::IsInvalidArgument(flat.status())) << flat.status();
  EXPECT_THAT(flat.status().message(), HasSubstr("F64"));
}

// An int64 tensor (a checkpoint's ids) is read but is no float32 variable.
TEST(InitialWeightsTest, AnInt64TensorIsRefusedByItsDtype) {
  const ModelSpec spec = Small();
  std::vector<NamedTensor> tensors;
  for (const VariableSpec& v : spec.variables) {
    NamedTensor t{v.name, v.shape, {}};
    t.dtype = NamedTensor::Dtype::kI64;
    t.ints.assign(v.size, 1);
    tensors.push_back(std::move(t));
  }
  const std::string path = TempPath("int64.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(path, spec);
  EXPECT_TRUE(absl::IsInvalidArgument(flat.status())) << flat.status();
  EXPECT_THAT(flat.status().message(),
              HasSubstr(absl::StrCat("variable '", spec.variables[0].name,
                                     "' is int64 in the file (tensor '", spec.variables[0].name,
                                     "'); float32 is needed")));
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

// Keras files of models made of layers (make_keras_weights.py --fixtures,
// from the float64 references' weights): a MultiHeadAttention's
// EinsumDense kernels under query_dense/ (and Keras 3's older
// _query_dense/) in Keras's [features, heads, key_dim] shapes, an LSTM's
// and a GRU's under cell/, and the same in the Keras 2 layout. Each
// flattens to the reference's weights, which give Keras's outputs
// (compute/graph_cpu_engine_test.cc checks those).
TEST(InitialWeightsTest, SequenceLayersFromKerasFilesAreTheReferencesWeights) {
  struct Case {
    const char* model;
    const char* reference;
    int index;
    std::vector<const char*> files;
  } cases[] = {
      {"sequence_mha",
       "tests/fixtures/attention/attention.json",
       3,
       {"sequence_mha.weights.h5", "sequence_mha_private.weights.h5", "sequence_mha.h5"}},
      {"sequence_lstm",
       "tests/fixtures/tfjs_reference/recurrent.json",
       0,
       {"sequence_lstm.weights.h5", "sequence_lstm.h5"}},
      {"sequence_gru",
       "tests/fixtures/tfjs_reference/recurrent.json",
       2,
       {"sequence_gru.weights.h5", "sequence_gru.h5"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    absl::StatusOr<std::string> text = ReadModelFile(absl::StrCat(kDir, c.model, ".json"));
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(*text, c.model);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::string> reference = ReadModelFile(c.reference);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const nlohmann::json weights = nlohmann::json::parse(*reference)["models"][c.index]["weights"];
    for (const char* file : c.files) {
      SCOPED_TRACE(file);
      absl::StatusOr<std::vector<float>> flat = LoadInitialWeights(absl::StrCat(kDir, file), *spec);
      ASSERT_TRUE(flat.ok()) << flat.status();
      int checked = 0;
      for (const VariableSpec& v : spec->variables) {
        const std::vector<float> want = weights.at(v.name).get<std::vector<float>>();
        ASSERT_EQ(static_cast<int64_t>(want.size()), v.size) << v.name;
        for (int64_t i = 0; i < v.size; ++i) {
          ASSERT_EQ((*flat)[v.offset + i], want[i]) << v.name << "[" << i << "]";
        }
        ++checked;
      }
      EXPECT_GE(checked, 5);
    }
  }
}

}  // namespace
}  // namespace pscluster
