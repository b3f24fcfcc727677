#include "model/dataset.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

const std::string kDir = "tests/fixtures/npy";

TEST(DatasetTest, Uint8NpzIsScaledLikeIdx) {
  absl::StatusOr<Dataset> d = LoadDataset(kDir + "/uint8.npz", Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 20);
  EXPECT_EQ(d->height, 4);
  EXPECT_EQ(d->width, 4);
  EXPECT_EQ(d->channels, 1);
  ASSERT_EQ(d->images.size(), 20u * 16);
  for (float v : d->images) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    ASSERT_NEAR(v * 255.0f, std::round(v * 255.0f), 1e-3);
  }
  EXPECT_EQ(d->targets[13], 3);
  absl::StatusOr<Dataset> t = LoadDataset(kDir + "/uint8.npz", Split::kTest);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->count, 5);
  EXPECT_EQ(std::vector<float>(d->images.begin(), d->images.begin() + 80), t->images);
}

TEST(DatasetTest, CompressedFloatNpzWithColumnLabelsAndFourDims) {
  absl::StatusOr<Dataset> d = LoadDataset(kDir + "/float_compressed.npz", Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 12);
  EXPECT_EQ(d->height, 6);
  EXPECT_EQ(d->width, 5);
  EXPECT_EQ(d->channels, 2);
  EXPECT_EQ(d->targets[4], 1);
  absl::StatusOr<Dataset> v2 = LoadDataset(kDir + "/v2.npz", Split::kTrain);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->images, d->images);  // the same array, written as format 2.0
  absl::StatusOr<Dataset> t = LoadDataset(kDir + "/float_compressed.npz", Split::kTest);
  ASSERT_TRUE(t.ok()) << t.status();  // int32 labels
  EXPECT_EQ(t->targets[2], 2);
}

TEST(DatasetTest, NpyFolderAndFlatExamples) {
  absl::StatusOr<Dataset> d = LoadDataset(kDir, Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 3);  // int16 labels
  EXPECT_EQ(d->targets[2], 2);
  ASSERT_TRUE(CheckDataFiles(kDir, Split::kTrain).ok());
  absl::StatusOr<Dataset> flat = LoadDataset(kDir + "/flat.npz", Split::kTrain);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->height, 1);
  EXPECT_EQ(flat->channels, 16);
}

// A model with several outputs reads one label array per output,
// y_<split>_<output>, joined column-wise in the outputs' order (here the
// reverse of the archive's), or one y_<split> of all their columns.
TEST(DatasetTest, LabelsPerOutput) {
  const std::string path = kDir + "/heads.npz";
  ASSERT_TRUE(CheckDataFiles(path, Split::kTrain).ok());
  absl::StatusOr<Dataset> d = LoadDataset(path, Split::kTrain, {"ctcvr", "ctr"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 6);
  EXPECT_EQ(d->targets_per_example, 2);
  // ctr: 0 1 0 1 0 1; ctcvr: where clicked and i % 3 == 1: example 1 only.
  EXPECT_EQ(d->targets, (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  absl::StatusOr<Dataset> t = LoadDataset(path, Split::kTest, {"ctcvr", "ctr"});
  ASSERT_TRUE(t.ok()) << t.status();  // y_test: both columns in one array
  EXPECT_EQ(t->targets, (std::vector<float>{1, 0, 0, 0}));
  absl::StatusOr<Dataset> missing = LoadDataset(path, Split::kTrain, {"ctr", "cvr"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("heads.npz: no member y_train_cvr.npy"),
            std::string::npos)
      << missing.status();
  // Without the outputs' names there is no y_train.
  EXPECT_FALSE(LoadDataset(path, Split::kTrain).ok());
}

TEST(DatasetTest, FitsTheModelOrSaysWhy) {
  Dataset d = *LoadDataset(kDir + "/float_compressed.npz", Split::kTrain);
  ModelSpec spec;
  spec.name = "m";
  spec.input_height = 6, spec.input_width = 5, spec.input_channels = 2, spec.num_classes = 3;
  EXPECT_TRUE(CheckDatasetFitsModel(d, "f.npz", spec).ok());
  spec.input_channels = 1;
  absl::Status s = CheckDatasetFitsModel(d, "f.npz", spec);
  EXPECT_NE(s.message().find("f.npz: examples are 6x5x2 but model \"m\" wants 6x5x1"),
            std::string::npos)
      << s;
  spec.input_height = spec.input_width = 1, spec.input_channels = 60;  // rank-1 input
  EXPECT_TRUE(CheckDatasetFitsModel(d, "f.npz", spec).ok());
  // A [steps, features] model (1 x steps x features) reads [N, steps,
  // features] arrays, which load as steps x features x 1, and its own shape.
  Dataset rows = d;
  rows.height = 6, rows.width = 10, rows.channels = 1;
  spec.input_height = 1, spec.input_width = 6, spec.input_channels = 10;
  EXPECT_TRUE(CheckDatasetFitsModel(rows, "r.npz", spec).ok());
  rows.height = 1, rows.width = 6, rows.channels = 10;
  EXPECT_TRUE(CheckDatasetFitsModel(rows, "r.npz", spec).ok());
  rows.height = 10, rows.width = 6, rows.channels = 1;  // transposed: no
  s = CheckDatasetFitsModel(rows, "r.npz", spec);
  EXPECT_NE(s.message().find("r.npz: examples are 10x6x1 but model \"m\" wants 1x6x10"),
            std::string::npos)
      << s;
  spec.input_height = spec.input_width = 1, spec.input_channels = 60;
  spec.input_channels = 60, spec.num_classes = 2;
  s = CheckDatasetFitsModel(d, "f.npz", spec);
  EXPECT_NE(s.message().find("label 2 of example 2: is not a class index: model \"m\" has 2 "
                             "classes"),
            std::string::npos)
      << s;
  // Labels of any width load; the model's loss says what fits: a label of
  // 300 is a class index for 301 classes or more.
  absl::StatusOr<Dataset> wide = LoadDataset(kDir + "/bad_label.npz", Split::kTrain);
  ASSERT_TRUE(wide.ok()) << wide.status();
  ModelSpec classes = spec;
  classes.input_height = wide->height, classes.input_width = wide->width;
  classes.input_channels = wide->channels, classes.num_classes = 10;
  s = CheckDatasetFitsModel(*wide, "bad_label.npz", classes);
  EXPECT_NE(s.message().find("bad_label.npz: label 300 of example 0: is not a class index"),
            std::string::npos)
      << s;
  classes.num_classes = 301;
  EXPECT_TRUE(CheckDatasetFitsModel(*wide, "bad_label.npz", classes).ok());
  classes.loss = LossKind::kBinaryCrossentropy, classes.num_classes = 1;
  s = CheckDatasetFitsModel(*wide, "bad_label.npz", classes);
  EXPECT_NE(s.message().find("label 300 of example 0: is not a binary label in [0, 1]"),
            std::string::npos)
      << s;
}

TEST(DatasetTest, BadFilesAreRefusedNamingFileAndProblem) {
  struct Case {
    const char* file;
    const char* expect;
  } cases[] = {
      {"bad_float64.npz", "bad_float64.npz: x_train: dtype '<f8' is not read"},
      {"bad_bigendian.npz", "bad_bigendian.npz: x_train: dtype '>f4' is not read"},
      {"bad_fortran.npz", "bad_fortran.npz: x_train: Fortran-order"},
      {"bad_counts.npz", "bad_counts.npz: y_train: labels of shape [11] for 12 images"},
      {"bad_truncated.npz", "bad_truncated.npz: x_train: truncated"},
      {"bad_missing.npz", "bad_missing.npz: no member x_test.npy"},
      {"bad_not_zip.npz", "bad_not_zip.npz: not an .npz (zip) archive"},
  };
  for (const Case& c : cases) {
    const Split split = std::string(c.file) == "bad_missing.npz" ? Split::kTest : Split::kTrain;
    absl::StatusOr<Dataset> d = LoadDataset(kDir + "/" + c.file, split);
    ASSERT_FALSE(d.ok()) << c.file;
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos)
        << "got: " << d.status().message() << "\nwanted: " << c.expect;
  }
  EXPECT_EQ(LoadDataset(kDir + "/nothing.npz", Split::kTrain).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(CheckDataFiles(kDir + "/bad_missing.npz", Split::kTest).ok());
}

// Headers that lie (found by fuzz/npy_fuzzer): a shape that is not a
// tuple once threw std::out_of_range out of the parser (the worker gone);
// a shape whose product overflows int64 was signed overflow. Both are
// refused naming the file.
TEST(DatasetTest, LyingNpyHeadersAreRefusedNamingTheFile) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "lying_npy";
  struct Case {
    const char* shape;
    const char* expect;
  } cases[] = {
      {"", "x_train.npy: bad shape \"\" (not a tuple)"},
      {"7", "x_train.npy: bad shape \"7\" (not a tuple)"},
      {"(4294967296, 4294967296, 16)", "x_train.npy: truncated: shape"},
  };
  for (const Case& c : cases) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string header =
        std::string("{'descr': '|u1', 'fortran_order': False, 'shape': ") + c.shape + ", }\n";
    std::string npy = std::string("\x93NUMPY\x01\x00", 8);
    npy += static_cast<char>(header.size() & 255);
    npy += static_cast<char>(header.size() >> 8);
    npy += header + std::string(16, '\0');
    for (const char* name : {"x_train.npy", "y_train.npy"}) {
      std::ofstream(dir / name, std::ios::binary) << npy;
    }
    absl::StatusOr<Dataset> d = LoadDataset(dir.string(), Split::kTrain);
    ASSERT_FALSE(d.ok()) << c.shape;
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos)
        << "got: " << d.status().message() << "\nwanted: " << c.expect;
  }
}

}  // namespace
}  // namespace pscluster
