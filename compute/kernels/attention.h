// Keras's Attention layer (dot-product scores) and MultiHeadAttention's
// core on the CPU: for each example, queries q [tq, d], keys k [tv, d] and
// values v [tv, dv], the features split among `heads` heads (head h: its
// d / heads and dv / heads columns):
//   scores = (q * scale) k^T per head, minus 1e9 where masked (Keras's
//   padding mask, subtracted in float32 as Keras does),
//   weights = softmax(scores) over the keys,
//   y = weights v, head by head side by side.
// The Attention layer (multi_head false, one head, scale 1) masks the keys
// its value's mask masks and zeroes a masked query's row (it multiplies by
// the query's mask); MultiHeadAttention's core masks every score of a
// masked query or key (so a masked query's row weighs every key alike, as
// Keras's masked softmax makes it) and zeroes nothing. Masks come as the
// ids of the Embedding (mask_zero) whose output they are: a step is
// masked where its id is padding (step_mask.h). Stateless functions; the
// products' sums in double.
#ifndef PSCLUSTER_COMPUTE_KERNELS_ATTENTION_H_
#define PSCLUSTER_COMPUTE_KERNELS_ATTENTION_H_

#include "compute/kernels/step_mask.h"

namespace pscluster {
namespace kernels {

struct AttentionShape {
  int tq = 0, tv = 0;  // query steps, key (and value) steps
  int d = 0, dv = 0;   // query and key features, value features (all heads')
  int heads = 1;
  float scale = 1.0f;       // the queries' factor (MultiHeadAttention: 1/sqrt(d / heads))
  bool multi_head = false;  // MultiHeadAttention's masks (above)
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
