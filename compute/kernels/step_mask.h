// StepMask: where a sequence's mask comes from (Keras's mask_zero): the
// ids [n, steps] of the Embedding whose output the sequence is, and the
// padding id. A negative padding id (a sparse table's window,
// model/sparse_layout.h) masks every negative id (kernels/embedding.h).
#ifndef PSCLUSTER_COMPUTE_KERNELS_STEP_MASK_H_
#define PSCLUSTER_COMPUTE_KERNELS_STEP_MASK_H_

namespace pscluster {
namespace kernels {

struct StepMask {
  const float* ids = nullptr;  // null: no mask
  int padding_id = 0;
  // Whether step t of example r is padding.
  bool masked(int r, int steps, int t) const {
    if (ids == nullptr) return false;
    const float id = ids[static_cast<long>(r) * steps + t];
    return padding_id < 0 ? id < 0.0f : id == static_cast<float>(padding_id);
  }
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_STEP_MASK_H_
