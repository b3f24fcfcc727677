// A Keras model's layers as the nodes its spec is built from: every layer
// of the file read (its name, its options through keras_layers.h, the
// input shape it declares) and put in an order where each node comes after
// what it reads. A Sequential model is a chain in file order; a Functional
// model's graph is resolved here: the inbound nodes of each layer (a layer
// applied twice, a shared layer, is two nodes that share its variables'
// names), the model's inputs in their order, and its one output. Internal
// to model/; plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_GRAPH_H_
#define PSCLUSTER_MODEL_KERAS_GRAPH_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/keras_dialects.h"
#include "model/keras_layers.h"
#include "model/keras_options.h"
#include "model/model_spec.h"

namespace pscluster {
namespace keras {

// The model's nodes as parsed: what its spec is built from.
struct ParsedLayers {
  std::vector<json> shape;  // the declared input shape, without the batch
  bool have_shape = false;
  // A Functional model with several inputs: each one's name and declared
  // shape, in the model's input order (nodes read ModelInput(k)).
  std::vector<std::pair<std::string, std::vector<json>>> inputs;
  std::vector<LayerSpec> specs;   // nodes, each after its inputs
  std::vector<LayerInits> inits;  // per node
  std::vector<LayerPenalties> penalties;  // per node
  // A model with several outputs: each one's node and layer name, in the
  // model's output order (empty for one output: the last node).
  std::vector<int> outputs;
  std::vector<std::string> output_names;
};

// The nodes of `model`, whose errors start with `source`: InvalidArgument
// for a layer that cannot be parsed, a graph that does not resolve (a
// missing layer or application, a cycle, more than kMaxOutputs outputs) or a model with
// no layer but its input.
absl::StatusOr<ParsedLayers> ParseLayers(const ModelEnvelope& model, const std::string& source);

}  // namespace keras
}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_GRAPH_H_
