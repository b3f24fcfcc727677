// Keras's LSTM and GRU layers on the CPU: the forward pass over the steps
// and the backward pass back through them, for each example of a batch of
// sequences x [n, steps, in].
//
// Weights in Keras's layout and gate order:
//   LSTM: kernel [in, 4u], recurrent_kernel [u, 4u], bias [4u], gates
//         i, f, c, o:
//           i = ra(x Wi + h Ui + bi), f = ra(x Wf + h Uf + bf),
//           g = a(x Wc + h Uc + bc),  o = ra(x Wo + h Uo + bo),
//           c' = f c + i g, h' = o a(c').
//   GRU:  kernel [in, 3u], recurrent_kernel [u, 3u], gates z, r, h;
//         reset_after (Keras 3's default, PyTorch's GRU): bias [2, 3u],
//         row 0 the input's, row 1 the recurrent part's:
//           z = ra(x Wz + bz + h Uz + rbz), r = ra(x Wr + br + h Ur + rbr),
//           g = a(x Wh + bh + r (h Uh + rbh)),
//         reset_after false (standalone Keras 2's default, TensorFlow.js's only):
//         bias [3u],
//           g = a(x Wh + bh + (r h) Uh),
//         h' = z h + (1 - z) g.
// a is the activation (Keras's default tanh), ra the recurrent activation
// (default sigmoid); the state starts at zeros. use_bias false: no bias
// (pass null).
//
// Masks (Keras's mask_zero): at a masked step the state (h, and c for the
// LSTM) is carried over unchanged, as Keras's RNN does, and the output
// there is the previous step's output (zeros before any step), which is
// the carried h: LSTM and GRU leave RNN's zero_output_for_mask at False
// (keras/src/layers/rnn/lstm.py and gru.py pass no such argument to
// RNN.__init__, whose default is False: rnn.py), and Keras 3's
// backend.rnn then writes tf.where(mask_t, output, prev_output)
// (keras/src/backend/tensorflow/rnn.py, rnn()'s _step; the jax, torch and
// numpy backends do the same). So with return_sequences a masked step
// repeats the last unmasked step's h, and an all-padding sequence gives
// zeros. (zero_output_for_mask True, which Bidirectional sets on its
// layers when they return sequences, would give zeros there instead; not
// supported here.) go_backwards reads the steps last to first, the mask
// with them, and with return_sequences writes the outputs in that
// processing order (output p is input step steps - 1 - p's), as Keras's
// backend.rnn does.
//
// Stateless functions. The whole batch goes through each step together:
// the input's projection for every step is one float32 GEMM (cpu_blas) each
// way, and each step's recurrent product one more (the gates' element-wise
// math per example between them), as PyTorch's CPU LSTM does; BLAS must run
// on the calling thread (UseSingleThreadedBlas).
#ifndef PSCLUSTER_COMPUTE_KERNELS_RECURRENT_H_
#define PSCLUSTER_COMPUTE_KERNELS_RECURRENT_H_

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/step_mask.h"

namespace pscluster {
namespace kernels {

enum class RecurrentCell { kLstm, kGru };

struct RecurrentShape {
  RecurrentCell cell = RecurrentCell::kLstm;
  int steps = 0, in = 0, units = 0;
  bool use_bias = true;
  bool reset_after = true;  // GRU only
  bool return_sequences = false;
  bool go_backwards = false;
  ActivationFn activation = ActivationFn::kTanh;
  ActivationFn recurrent_activation = ActivationFn::kSigmoid;
  float alpha = 0.0f;  // the activations' parameter (hard_sigmoid's slope), as ActivationValue's
};

// The gates a step: 4 (LSTM) or 3 (GRU).
int RecurrentGates(const RecurrentShape& s);

// The bias's element count: 4u (LSTM), 3u or 6u (GRU, reset_after); 0
// when use_bias is false.
int64_t RecurrentBiasSize(const RecurrentShape& s);

// The floats a forward pass keeps per example for the backward pass:
// steps * 11u (LSTM: the gates' inputs and activations, c, a(c), h) or
// steps * 8u (GRU: the gates' inputs and activations, the reset part, h).
int64_t RecurrentSavedPerExample(const RecurrentShape& s);

// y: [n, steps, units] with return_sequences, else [n, units] (the last
// step's state). `saved` ([n * RecurrentSavedPerExample(s)]) receives what
// the backward pass needs.
void RecurrentForward(int n, const RecurrentShape& s, const float* x, const float* kernel,
                      const float* recurrent_kernel, const float* bias, StepMask mask, float* y,
                      float* saved);

// From gy (y's shape) and the forward's `saved`: gx [n, steps, in]
// (overwritten; may be null), gkernel, grecurrent and gbias (overwritten;
// gbias null without a bias), summed over the batch: full backpropagation
// through time. A masked step adds nothing to the weights' gradients and
// its gx row is zeros; the state it carries passes its gradient through.
// The same mask and inputs as the forward's.
void RecurrentBackward(int n, const RecurrentShape& s, const float* x, const float* kernel,
                       const float* recurrent_kernel, const float* bias, StepMask mask,
                       const float* saved, const float* gy, float* gx, float* gkernel,
                       float* grecurrent, float* gbias);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_RECURRENT_H_
