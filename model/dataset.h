// One interface to the training and test sets, whatever their format, so a
// worker asks for examples and never for a file: a folder of MNIST-style IDX
// files (model/idx_dataset.h), a folder of NumPy arrays x_train.npy,
// y_train.npy, x_test.npy, y_test.npy, or one NumPy .npz archive holding
// those four (np.savez or np.savez_compressed; read with libzip). Images
// are [N, H, W], [N, H, W, C] or [N, F]; uint8 pixels are scaled by 1/255
// as for IDX, float32 values are taken as they are. Labels are [N] or
// [N, K]: integer class indices ([N] or [N, 1]), one-hot or soft class
// weights, binary labels or regression targets ([N, K]; integers or
// float32/float64), which CheckDatasetFitsModel checks against the model's
// loss. A folder holding tfrecord_schema.json is TFRecord data
// (model/tfrecord_source.h); one holding train.txt or test.txt (or .gz) is
// Criteo click logs (model/criteo_dataset.h). Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_DATASET_H_
#define PSCLUSTER_MODEL_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/example_source.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"

namespace pscluster {

// The `split` of the data at `path`. NotFound when a file or member is
// absent; InvalidArgument naming the file (and member) and the problem
// otherwise: a dtype we do not read, Fortran order, a truncated or
// over-long array, a bad header, images and labels of different counts,
// no examples, a label out of [0, 255].
//
// `outputs`: the output names of a model with several (OutputNames). Its
// labels are then "y_<split>" ([N, K]: each output's columns in turn), or,
// in an .npz or .npy folder without it, one array per output,
// "y_<split>_<output>", joined column-wise in the outputs' order.
absl::StatusOr<Dataset> LoadDataset(const std::string& path, Split split,
                                    const std::vector<std::string>& outputs = {});

// The names of `spec`'s outputs when it has several (ModelSpec::outputs),
// else none: what LoadDataset's `outputs` wants.
std::vector<std::string> OutputNames(const ModelSpec& spec);

// The cheap start-up check: the files of `split` are there and readable
// (an .npz opens as a zip and has the members, labels per output,
// y_<split>_<output>, standing for y_<split>; a TFRecord folder's schema
// is valid and the split has files); contents are not read.
absl::Status CheckDataFiles(const std::string& path, Split split);

// The `split` of the data at `path` for training: TFRecord files read on
// demand (only an index of the records is held), anything else loaded into
// memory as LoadDataset does. Errors as LoadDataset's; a bad TFRecord
// header is DataLoss naming the file and record.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenExampleSource(
    const std::string& path, Split split, const std::vector<std::string>& outputs = {});

// CheckDatasetFitsModel for a source: the shapes, and every label of a
// source in memory now; a source read on demand gets CheckTarget as its
// target check, so a bad label fails the Gather that reads it.
absl::Status CheckSourceFitsModel(ExampleSource* source, const std::string& path,
                                  const ModelSpec& spec);

// Whether label value `t` fits `spec`'s loss: a class index below
// num_classes, a class weight >= 0, a binary label in [0, 1], a finite
// regression target. With several outputs, `column` (the value's place in
// an example's targets) says whose loss: InvalidArgument saying which
// otherwise, naming the output.
absl::Status CheckTarget(const ModelSpec& spec, float t, int column = 0);

// Whether `data` (read from `path`) fits `spec`'s input and loss (label
// values per example, each label's range): InvalidArgument naming the file
// and both shapes, or the first label that does not fit, otherwise. A model with a rank-1 input (1 x 1 x F) takes any
// examples of F values, flattened row-major as Keras's Flatten would.
absl::Status CheckDatasetFitsModel(const Dataset& data, const std::string& path,
                                   const ModelSpec& spec);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_DATASET_H_
