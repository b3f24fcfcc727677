#include "model/keras_weights.h"

#include <hdf5/serial/hdf5.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// tests/fixtures/keras/make_keras_weights.py --fixtures: keras3_small.json
// and its weights in each layout, variable k's element i = (k + 1) + i / 4096.
const char kDir[] = "tests/fixtures/keras/";

ModelSpec Small() {
  absl::StatusOr<std::string> text = ReadModelFile(std::string(kDir) + "keras3_small.json");
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text.ok() ? *text : "", "keras3_small");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec();
}

std::map<std::string, const FileTensor*> ByVariable(const std::vector<FileTensor>& tensors) {
  std::map<std::string, const FileTensor*> out;
  for (const FileTensor& t : tensors) {
    if (!t.variable.empty()) out[t.variable] = &t;
  }
  return out;
}

// Every variable of the small model found once, from `prefix`'s groups,
// with its shape and every value in its place.
void ExpectEveryValue(const std::vector<FileTensor>& tensors, const ModelSpec& spec,
                      size_t variables = 12) {
  ASSERT_EQ(spec.variables.size(), variables);
  ASSERT_EQ(tensors.size(), spec.variables.size());
  const std::map<std::string, const FileTensor*> by = ByVariable(tensors);
  for (size_t k = 0; k < spec.variables.size(); ++k) {
    const VariableSpec& v = spec.variables[k];
    auto it = by.find(v.name);
    ASSERT_NE(it, by.end()) << v.name;
    const FileTensor& t = *it->second;
    EXPECT_EQ(t.shape, v.shape) << v.name << " from " << t.where;
    EXPECT_EQ(t.dtype, "float32") << t.where;
    ASSERT_EQ(static_cast<int64_t>(t.values.size()), v.size) << t.where;
    for (int64_t i = 0; i < v.size; ++i) {
      ASSERT_EQ(t.values[i], static_cast<float>((k + 1) + i / 4096.0))
          << v.name << "[" << i << "] from " << t.where;
    }
  }
}

TEST(KerasWeightsTest, GroupPrefixesAreKerasSnakeCaseClassNames) {
  auto prefix = [](LayerKind kind, const char* name = "x") {
    LayerSpec l;
    l.kind = kind;
    l.name = name;
    return KerasGroupPrefix(l);
  };
  EXPECT_EQ(prefix(LayerKind::kConv2D), "conv2d");
  EXPECT_EQ(prefix(LayerKind::kDense), "dense");
  EXPECT_EQ(prefix(LayerKind::kBatchNorm), "batch_normalization");
  EXPECT_EQ(prefix(LayerKind::kDepthwiseConv2D), "depthwise_conv2d");
  EXPECT_EQ(prefix(LayerKind::kSeparableConv2D), "separable_conv2d");
  EXPECT_EQ(prefix(LayerKind::kLayerNorm), "layer_normalization");
  EXPECT_EQ(prefix(LayerKind::kLstm), "lstm");
  EXPECT_EQ(prefix(LayerKind::kGru), "gru");
  EXPECT_EQ(prefix(LayerKind::kMaxPool2D), "");
  EXPECT_EQ(prefix(LayerKind::kAttention), "");           // Attention has no variables
  EXPECT_EQ(prefix(LayerKind::kDense, "mha/query"), "");  // a MultiHeadAttention's part
  LayerSpec l;
  l.kind = LayerKind::kConv2D;
  l.one_d = true;
  EXPECT_EQ(KerasGroupPrefix(l), "conv1d");
  l.kind = LayerKind::kAttention;
  l.multi_head = true;
  EXPECT_EQ(KerasGroupPrefix(l), "multi_head_attention");
}

TEST(KerasWeightsTest, ReadsKeras3WeightsH5ByClassGroupsInLayerOrder) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_small.weights.h5", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, spec);
  // conv2d_1 is the second Conv2D (conv_b), dense_1 the second Dense (out).
  const std::map<std::string, const FileTensor*> by = ByVariable(*t);
  EXPECT_EQ(by.at("conv_b/kernel")->where, "layers/conv2d_1/vars/0");
  EXPECT_EQ(by.at("bn_a/moving_variance")->where, "layers/batch_normalization/vars/3");
  EXPECT_EQ(by.at("out/bias")->where, "layers/dense_1/vars/1");
}

// A Functional model with DepthwiseConv2D, SeparableConv2D and
// LayerNormalization among three Conv2D layers (make_keras_weights.py's
// modern_fixture): each class numbered on its own, every variable of a
// layer in Keras's order (a SeparableConv2D's depthwise, pointwise, bias).
TEST(KerasWeightsTest, ReadsModernLayersGroups) {
  absl::StatusOr<std::string> text = ReadModelFile(std::string(kDir) + "tfjs_modern.json");
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(*text, "tfjs_modern");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "tfjs_modern.weights.h5", *spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, *spec, 15);
  const std::map<std::string, const FileTensor*> by = ByVariable(*t);
  EXPECT_EQ(by.at("separable/pointwise_kernel")->where, "layers/separable_conv2d/vars/1");
  EXPECT_EQ(by.at("depthwise/bias")->where, "layers/depthwise_conv2d/vars/1");
  EXPECT_EQ(by.at("stem_ln/beta")->where, "layers/layer_normalization/vars/1");
  EXPECT_EQ(by.at("dilated/kernel")->where, "layers/conv2d_2/vars/0");
}

TEST(KerasWeightsTest, ReadsTheWeightsInsideAKerasArchive) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_small_trained.keras", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, spec);
}

TEST(KerasWeightsTest, NameAttributesDecideOverTheGroupNumbering) {
  // The two Dense groups are numbered the other way round; their vars
  // groups' "name" attributes say which layer each is.
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_small_named.weights.h5", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, spec);
  EXPECT_EQ(ByVariable(*t).at("out/kernel")->where, "layers/dense/vars/0");
}

TEST(KerasWeightsTest, ReadsKeras213LayerCheckpointDependencies) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_small_2_13.weights.h5", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, spec);
  EXPECT_EQ(ByVariable(*t).at("fc/kernel")->where, "_layer_checkpoint_dependencies/dense/vars/0");
}

TEST(KerasWeightsTest, ReadsKeras2SaveWeightsByLayerAndWeightName) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras2_small.h5", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectEveryValue(*t, spec);
  EXPECT_EQ(ByVariable(*t).at("bn_a/gamma")->where, "bn_a/bn_a/gamma:0");
}

TEST(KerasWeightsTest, MarksWhatNoVariableTakesAndKeepsOtherDtypes) {
  const ModelSpec spec = Small();
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_small_bad.weights.h5", spec);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, const FileTensor*> by_where;
  for (const FileTensor& f : *t) by_where[f.where] = &f;
  // The optimizer's variables are not read at all.
  EXPECT_EQ(by_where.count("optimizer/vars/0"), 0u);
  ASSERT_EQ(by_where.count("layers/dense_2/vars/0"), 1u);
  EXPECT_EQ(by_where.at("layers/dense_2/vars/0")->variable, "");
  EXPECT_EQ(by_where.at("layers/batch_normalization/vars/4")->variable, "");
  const FileTensor& f64 = *by_where.at("layers/conv2d/vars/0");
  EXPECT_EQ(f64.variable, "conv_a/kernel");
  EXPECT_EQ(f64.dtype, "float64");
  EXPECT_TRUE(f64.values.empty());
  EXPECT_EQ(by_where.at("layers/dense/vars/0")->shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(by_where.count("layers/dense_1/vars/1"), 0u);
}

TEST(KerasWeightsTest, TellsWhetherAnArchiveHoldsWeights) {
  absl::StatusOr<bool> has =
      KerasArchiveHasWeights(std::string(kDir) + "keras3_small_trained.keras");
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_TRUE(*has);
  has = KerasArchiveHasWeights(std::string(kDir) + "keras3_cnn.keras");
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_FALSE(*has);
  EXPECT_TRUE(absl::IsInvalidArgument(
      KerasArchiveHasWeights(std::string(kDir) + "keras3_small.json").status()));
}

TEST(KerasWeightsTest, RefusesFilesThatAreNotKerasWeights) {
  const ModelSpec spec = Small();
  // A .keras archive saved without weights.
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(std::string(kDir) + "keras3_cnn.keras", spec);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("the archive has no model.weights.h5"));
  // Not HDF5.
  t = ReadKerasWeights(std::string(kDir) + "keras3_small.json", spec);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("keras3_small.json: not an HDF5 file"));
  t = ReadKerasWeights(std::string(kDir) + "not_keras_weights.h5", spec);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("neither Keras 3 weights"));
  t = ParseKerasWeights("\x89HDF\r\n\x1a\n but cut short", "mem.h5", spec);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("mem.h5"));
  // Missing.
  t = ReadKerasWeights("/nonexistent/x.weights.h5", spec);
  EXPECT_TRUE(absl::IsNotFound(t.status())) << t.status();
  t = ReadKerasWeights("/nonexistent/x.keras", spec);
  EXPECT_TRUE(absl::IsNotFound(t.status())) << t.status();
}

// A Keras 3 weights file whose layers/dense/vars/0 is a float32 dataset of
// `dims`, made by `dcpl` (its storage), never written.
std::string WeightsWithStorage(const std::string& name, std::vector<hsize_t> dims, hid_t dcpl) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(file, "layers/dense/vars/0", H5T_IEEE_F32LE, space, lcpl, dcpl,
                              H5P_DEFAULT);
  EXPECT_GE(ds, 0);
  H5Dclose(ds);
  H5Sclose(space);
  H5Pclose(lcpl);
  H5Fclose(file);
  return path;
}

// hdf5_weights_fuzzer: a shape that claims more than the file stores is
// refused before anything is allocated or read (libhdf5 read past its own
// buffer for one), and so are values kept in other files.
TEST(KerasWeightsTest, RefusesDatasetsThatClaimMoreThanTheFileStores) {
  const ModelSpec spec = Small();
  const hid_t chunked = H5Pcreate(H5P_DATASET_CREATE);
  const hsize_t chunk[] = {1024, 1024};
  H5Pset_chunk(chunked, 2, chunk);
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights(WeightsWithStorage("huge.weights.h5", {1 << 20, 1 << 20}, chunked), spec);
  H5Pclose(chunked);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("layers/dense/vars/0: its shape needs 4398046511104 "
                                              "bytes but the file stores 0"));

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string secret = std::string(tmp != nullptr ? tmp : "/tmp") + "/secret.raw";
  std::ofstream(secret) << "sixteen bytes...";
  const hid_t external = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(external, secret.c_str(), 0, 16);
  t = ReadKerasWeights(WeightsWithStorage("external.weights.h5", {4}, external), spec);
  H5Pclose(external);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("its values are in other files"));
}

// A file on which Debian's libhdf5 1.10 allocates 23 GB (40 million small
// blocks, before any dataset is read), found by hdf5_weights_fuzzer: read
// in a child process, it costs the caller nothing but a refusal naming it.
TEST(KerasWeightsTest, AFileThatMakesLibhdf5AllocateWithoutEndIsRefused) {
  const ModelSpec spec = Small();
  Hdf5ReadLimits limits;
  limits.memory_bytes = int64_t{256} << 20;
  absl::StatusOr<std::vector<FileTensor>> t =
      ReadKerasWeights("fuzz/corpus/hdf5_weights_fuzzer/libhdf5_allocates_23_GB", spec, limits);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(),
              HasSubstr("libhdf5_allocates_23_GB: reading it took more than 256 MiB of memory, "
                        "which a weights file of 41584 bytes does not need"));
  // And the next file is read as ever.
  t = ReadKerasWeights(std::string(kDir) + "keras3_small.weights.h5", spec);
  EXPECT_TRUE(t.ok()) << t.status();
}

// libhdf5 crashing inside the reading process (as it does in H5HG_read on
// fuzz/corpus/hdf5_weights_fuzzer/libhdf5_crashes_in_H5HG_read under
// ASan) is a refusal of the file; the process ending any other way is an
// internal error. Both made here by a hook.
TEST(KerasWeightsTest, TheReadingProcessDyingIsNamed) {
  const ModelSpec spec = Small();
  const std::string path = std::string(kDir) + "keras3_small.weights.h5";
  WeightsReaderHooks hooks;
  hooks.before_exit = [] { ::raise(SIGSEGV); };
  SetWeightsReaderHooks(hooks);
  absl::StatusOr<std::vector<FileTensor>> t = ReadKerasWeights(path, spec);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(),
              HasSubstr("keras3_small.weights.h5: the HDF5 library crashed reading it (signal "
                        "11, Segmentation fault): the file is malformed"));
  hooks.before_exit = [] { ::_exit(1); };
  SetWeightsReaderHooks(hooks);
  t = ReadKerasWeights(path, spec);
  EXPECT_TRUE(absl::IsInternal(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("the process reading it exited with status 1"));
  SetWeightsReaderHooks({});
  t = ReadKerasWeights(path, spec);
  EXPECT_TRUE(t.ok()) << t.status();
}

}  // namespace
}  // namespace pscluster
