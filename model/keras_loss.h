// The loss a Keras model trains on and the check that the model's output
// fits it: the --loss flag's name, else the file's compiled loss (Keras 3's
// compile_config, tf.keras's or TensorFlow.js's training_config), else one
// chosen from the output's activation; the output Dense layer's activation
// must suit it. Refusals are InvalidArgument naming the flag, the loss or
// the layer. Internal to model/; plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_LOSS_H_
#define PSCLUSTER_MODEL_KERAS_LOSS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/keras_options.h"
#include "model/loss.h"
#include "model/model_spec.h"

namespace pscluster {
namespace keras {

// The loss the model trains on; from_logits as the file or flag says it
// (absent: unset).
struct LossChoice {
  LossKind kind = LossKind::kSparseCategoricalCrossentropy;
  bool given = false;  // by the file or a flag; else chosen from the output
  std::optional<bool> from_logits;
};

// The loss `flag` names (any of Keras's spellings) when not empty, else
// the one `file_loss` gives (a name or a Keras loss object; null: none,
// `given` false). Errors start with "--loss=<flag>" or `source`.
absl::StatusOr<LossChoice> ChooseLoss(const std::string& flag, const json& file_loss,
                                      const std::string& source);

// Checks that the model's output fits the loss and gives the output's
// width: the output, or the node its tail of Dropout, Add and one last
// Activation reads (an Add through its first input: logits summed with
// others, as DeepFM sums its deep tower's logit with the factorization
// machine's terms, the Dense then linear), is a Dense layer whose
// activation the loss takes, or a Dot (one linear logit, as a two-tower
// model's):
// softmax (fused) or linear logits for categorical cross-entropy; sigmoid
// (fused) or linear logits for binary; anything but softmax for
// regression. *info, when given, says where the loss reads (HeadInfo).
// Without a loss from the
// file or a flag, a sigmoid output trains on binary cross-entropy and any
// other on sparse categorical cross-entropy (set in `loss`).
struct HeadInfo;
absl::StatusOr<int> CheckOutput(const std::vector<LayerSpec>& specs, LossChoice* loss,
                                const std::string& source, HeadInfo* info = nullptr);

// Where a checked output's loss reads: `head` the Dense or Dot node, `tail`
// a last Activation layer after it (else -1), `squashed` whether the
// output's sigmoid or softmax is fused into its cross-entropy (which then
// reads the logits before it).
struct HeadInfo {
  int width = 0;
  int head = -1, tail = -1;
  bool squashed = false;
};

// One output of a model with several, checked: its loss and weight, and
// where the loss reads it.
struct OutputLoss {
  int node = -1;  // the output's node
  LossKind kind = LossKind::kBinaryCrossentropy;
  float weight = 1.0f;
  // A Multiply's product, read as it is (binary cross-entropy then on
  // probabilities); else `head` as CheckHead found it.
  bool probabilities = false;
  HeadInfo head;
};

// The outputs of a model with several (`outputs`, their nodes, and
// `names`, in the model's order) checked as CheckOutput checks one, each
// with its loss: `flag` one loss name for all or "<output>:<loss>,..." for
// each, else the file's loss (one for all, a list in output order, or a
// dict by output name; an output without one gets one from its
// activation), weighted by the file's loss_weights (a list or a dict; 1
// where absent). A Multiply output (a product of sigmoids) trains on
// binary cross-entropy on probabilities or a regression loss.
absl::StatusOr<std::vector<OutputLoss>> CheckOutputs(const std::vector<LayerSpec>& specs,
                                                     const std::vector<int>& outputs,
                                                     const std::vector<std::string>& names,
                                                     const std::string& flag, const json& file_loss,
                                                     const json& file_weights,
                                                     const std::string& source);

}  // namespace keras
}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_LOSS_H_
