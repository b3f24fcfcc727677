// Keras weight files, read through HDF5 (Debian's libhdf5), as tensors
// named after the model's variables ("<layer>/kernel", ...; model_spec.h):
//
//   Keras 3  `model.save_weights("x.weights.h5")`, and the model.weights.h5
//            inside a `.keras` archive (`model.save("x.keras")`): one group
//            per layer, layers/<class>/vars/<i>, <class> the layer's class
//            in snake case, numbered in the model's layer order per class
//            (dense, dense_1, ...; keras/src/saving/saving_lib.py), <i> the
//            layer's variables in get_weights() order. Newer Keras writes
//            the layer's name as the vars group's "name" attribute: it is
//            used when present. A layer made of other layers keeps their
//            variables under the attribute that holds each: an LSTM's or
//            GRU's in layers/<class>/cell/vars/<i> (kernel, recurrent
//            kernel, bias), a MultiHeadAttention's in
//            layers/<class>/query_dense/vars/<i> (key_dense, value_dense,
//            output_dense; "_query_dense", ... in Keras before the public
//            properties), each EinsumDense's kernel and bias in Keras's
//            shapes ([features, heads, key_dim], ..., the output's
//            [heads, value_dim, features]), read as the model's
//            (<layer>/query/kernel [features, heads x key_dim], ...: the
//            same values in the same order). Keras 2.13-2.15 wrote the same under
//            _layer_checkpoint_dependencies/. Everything outside layers/
//            (optimizer/, the model's own vars/, metrics) is not weights and
//            is skipped.
//   Keras 2  `model.save_weights("x.h5")` (a root attribute layer_names) or
//            `model.save("x.h5")` (the same under model_weights/): a group
//            per layer named as the layer, datasets <layer>/.../<var>:0
//            (an LSTM's <layer>/<layer>/lstm_cell/kernel:0, a
//            MultiHeadAttention's <layer>/<layer>/query/kernel:0).
//
// Kernel layouts are Keras's own, as the model's (Conv2D HWIO, Dense
// [in, out]): no transposes. Matching the tensors to the variables and
// checking them is model/initial_weights.h's.
//
// libhdf5 reads the file in a child process (forked), bounded in memory
// and time: Debian's libhdf5 1.10 crashes or allocates tens of GB on some
// malformed files, which then cost the child, not the daemon. The
// functions are safe to call from any thread.
#ifndef PSCLUSTER_MODEL_KERAS_WEIGHTS_H_
#define PSCLUSTER_MODEL_KERAS_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/model_spec.h"

namespace pscluster {

// One tensor of a weights file.
struct FileTensor {
  // The model variable it is for ("<layer>/<var>"); empty when it belongs
  // to no layer of the model (or past the layer's variables).
  std::string variable;
  std::string where;  // its place in the file: "layers/dense_1/vars/0"
  std::vector<int64_t> shape;  // {} is a scalar
  // "float32", or the file's other type: "float64", "float16", "int32",
  // "bfloat16", ...; then `values` is empty.
  std::string dtype;
  std::vector<float> values;  // float32: product(shape) values, row-major
};

// Bounds on the process that reads an HDF5 file; past them it is killed
// and the file refused as malformed.
struct Hdf5ReadLimits {
  // Growth of its resident memory; 0: 512 MiB + 4 bytes per byte of file.
  int64_t memory_bytes = 0;
  // Wall time; 0: 60 s + 1 s per 10 MB of file.
  absl::Duration time = absl::ZeroDuration();
};

// The weight tensors of `path`: a .keras archive (its model.weights.h5) or
// an HDF5 weights file in the Keras 3 or Keras 2 layout. `spec` gives the
// Keras 3 groups their layers (its layer order and kinds). NotFound for a
// missing file; InvalidArgument naming the file for one that is not a zip
// archive / HDF5 file, an archive without model.weights.h5, or an HDF5
// file in neither layout, or one on which libhdf5 crashes or exceeds
// `limits`.
absl::StatusOr<std::vector<FileTensor>> ReadKerasWeights(const std::string& path,
                                                         const ModelSpec& spec,
                                                         const Hdf5ReadLimits& limits = {});

// Whether the .keras archive at `path` holds weights (a model.weights.h5).
// NotFound / InvalidArgument naming the file when it cannot be read as a
// zip archive.
absl::StatusOr<bool> KerasArchiveHasWeights(const std::string& path);

// The same for an HDF5 file held in memory; `source` names it in errors.
absl::StatusOr<std::vector<FileTensor>> ParseKerasWeights(std::string_view h5_bytes,
                                                          const std::string& source,
                                                          const ModelSpec& spec,
                                                          const Hdf5ReadLimits& limits = {});

// For fuzzing (fuzz/forked_reader.h): functions the reading process runs
// as it starts and just before it exits; null for none.
struct WeightsReaderHooks {
  void (*at_start)() = nullptr;
  void (*before_exit)() = nullptr;
};
void SetWeightsReaderHooks(const WeightsReaderHooks& hooks);

// Keras 3's name for a layer's group, before numbering: its class in snake
// case ("conv2d", "conv1d", "dense", "lstm", "multi_head_attention" for a
// MultiHeadAttention's core); "" for kinds without variables and for the
// parts the parser made of a MultiHeadAttention (named "<layer>/...").
std::string KerasGroupPrefix(const LayerSpec& layer);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_WEIGHTS_H_
