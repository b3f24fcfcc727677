// One interface to the training and test sets, whatever their format, so a
// worker asks for examples and never for a file: a folder of MNIST-style IDX
// files (model/idx_dataset.h), a folder of NumPy arrays x_train.npy,
// y_train.npy, x_test.npy, y_test.npy, or one NumPy .npz archive holding
// those four (np.savez or np.savez_compressed; read with libzip). Images
// are [N, H, W], [N, H, W, C] or [N, F]; uint8 pixels are scaled by 1/255
// as for IDX, float32 values are taken as they are. Labels are [N] or
// [N, 1] class indices (uint8, int16/uint16, int32 or int64, each in
// [0, 255]). Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_DATASET_H_
#define PSCLUSTER_MODEL_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"

namespace pscluster {

// The `split` of the data at `path`. NotFound when a file or member is
// absent; InvalidArgument naming the file (and member) and the problem
// otherwise: a dtype we do not read, Fortran order, a truncated or
// over-long array, a bad header, images and labels of different counts,
// no examples, a label out of [0, 255].
absl::StatusOr<Dataset> LoadDataset(const std::string& path, Split split);

// The cheap start-up check: the files of `split` are there and readable
// (an .npz opens as a zip and has the members); contents are not read.
absl::Status CheckDataFiles(const std::string& path, Split split);

// Whether `data` (read from `path`) fits `spec`'s input and classes:
// InvalidArgument naming the file and both shapes, or the first label out
// of range, otherwise. A model with a rank-1 input (1 x 1 x F) takes any
// examples of F values, flattened row-major as Keras's Flatten would.
absl::Status CheckDatasetFitsModel(const Dataset& data, const std::string& path,
                                   const ModelSpec& spec);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_DATASET_H_
