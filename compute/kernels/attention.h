// Keras's Attention layer (dot-product scores) on the CPU: for each example,
// queries q [tq, d], keys k [tv, d] and values v [tv, dv],
//   scores = q k^T, minus 1e9 where a key's step is masked (Keras's
//   padding mask, as Keras subtracts it in float32),
//   weights = softmax(scores) over the keys,
//   y = weights v, each row times its query's mask (1 where not masked),
// and the gradients at q, k and v. Keys' and queries' masks come as the ids
// of the Embedding (mask_zero) whose output they are: a step is masked
// where its id is `padding_id`. Stateless functions; the softmax's sums in
// double.
#ifndef PSCLUSTER_COMPUTE_KERNELS_ATTENTION_H_
#define PSCLUSTER_COMPUTE_KERNELS_ATTENTION_H_

namespace pscluster {
namespace kernels {

struct AttentionShape {
  int tq = 0, tv = 0;  // query steps, key (and value) steps
  int d = 0, dv = 0;   // query and key features, value features
};

// Where a mask comes from: ids [n, steps] (null: no mask) and the padding id.
struct StepMask {
  const float* ids = nullptr;
  int padding_id = 0;
  bool masked(int r, int steps, int t) const {
    return ids != nullptr && ids[static_cast<long>(r) * steps + t] == padding_id;
  }
};

// y [n, tq, dv] from q [n, tq, d], k [n, tv, d], v [n, tv, dv].
void AttentionForward(int n, const AttentionShape& s, const float* q, const float* k,
                      const float* v, StepMask query_mask, StepMask key_mask, float* y);

// The gradients from gy [n, tq, dv], each written where not null:
// gq [n, tq, d], gk [n, tv, d], gv [n, tv, dv]. When k and v are one
// input (Keras's Attention([query, value]) uses the value as the key), pass
// gk == gv: that input then gets both gradients, summed.
void AttentionBackward(int n, const AttentionShape& s, const float* q, const float* k,
                       const float* v, StepMask query_mask, StepMask key_mask, const float* gy,
                       float* gq, float* gk, float* gv);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_ATTENTION_H_
