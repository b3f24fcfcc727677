#include "model/keras_model.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/builtin_models.h"
#include "model/keras_dialects.h"
#include "model/keras_graph.h"
#include "model/keras_loss.h"
#include "model/keras_options.h"
#include "model/zip_archive.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using keras::Bad;
using keras::json;
using keras::ParsedLayers;
using keras::Show;

struct InputShape {
  int h, w, c;
};

// Whether every node reading the model's input is a Flatten.
bool ReadByFlattenOnly(const std::vector<LayerSpec>& specs) {
  bool any = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (int j : specs[i].inputs.empty() ? std::vector<int>{static_cast<int>(i) - 1}
                                         : specs[i].inputs) {
      if (j != kModelInput) continue;
      if (specs[i].kind != LayerKind::kFlatten) return false;
      any = true;
    }
  }
  return any;
}

// Declared shape `shape` (without the batch) as height x width x channels:
// [H, W, C], [F] (1 x 1 x F), [steps, features] (1 x steps x features) or,
// when `flattened_first`, [H, W] (H x W x 1). `what` names it in errors.
absl::StatusOr<InputShape> ShapeOfDims(const std::vector<json>& shape, bool flattened_first,
                                       const std::string& what) {
  std::vector<int> dims;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20)) {
      return Bad(what, absl::StrCat("input shape ", Show(json(shape)),
                                    ": every dimension but the batch must be a positive "
                                    "number (no None)"));
    }
    dims.push_back(d.get<int>());
  }
  int h, w, c;
  if (dims.size() == 3) {
    h = dims[0], w = dims[1], c = dims[2];
  } else if (dims.size() == 1) {
    h = w = 1, c = dims[0];
  } else if (dims.size() == 2 && flattened_first) {
    h = dims[0], w = dims[1], c = 1;  // [H, W] flattened first: as [H, W, 1]
  } else if (dims.size() == 2) {
    h = 1, w = dims[0], c = dims[1];  // [steps, features]: 1 x steps x features
  } else {
    return Bad(what, absl::StrCat("input shape ", Show(json(shape)),
                                  " is not supported ([height, width, channels], "
                                  "[steps, features] or [features])"));
  }
  if (static_cast<int64_t>(h) * w * c > (int64_t{1} << 26)) {
    return Bad(what, absl::StrCat("input shape ", Show(json(shape)), " is too large"));
  }
  return InputShape{h, w, c};
}

// The declared input shape: [H, W, C], [F], [steps, features], or [H, W]
// read by a Flatten first (H x W x 1).
absl::StatusOr<InputShape> DeclaredInputShape(const ParsedLayers& parsed,
                                              const std::string& source) {
  if (!parsed.have_shape) {
    return Bad(source, "no input shape (an InputLayer's batch_shape, or batch_input_shape or "
                       "build_config on the first layer)");
  }
  return ShapeOfDims(parsed.shape, ReadByFlattenOnly(parsed.specs), source);
}

// A model with several inputs: each one's name and shape ([H, W, C],
// [steps, features] or [F]), in the model's input order; empty for a model
// with one.
absl::StatusOr<std::vector<InputSpec>> InputsOf(const ParsedLayers& parsed,
                                                const std::string& source) {
  std::vector<InputSpec> out;
  for (const auto& [name, shape] : parsed.inputs) {
    absl::StatusOr<InputShape> in =
        ShapeOfDims(shape, false, absl::StrCat(source, ": input '", name, "'"));
    if (!in.ok()) return in.status();
    out.push_back(InputSpec{name, in->h, in->w, in->c});
  }
  return out;
}

// Gives each variable of `spec` the initializer and regularizer its
// layer's file entry set (a regularizer of a variable the layer lacks, a
// bias with use_bias false, is ignored, as Keras does).
void ApplyVariableOptions(const ParsedLayers& parsed, ModelSpec* spec) {
  for (VariableSpec& v : spec->variables) {
    const size_t slash = v.name.rfind('/');
    const std::string layer = v.name.substr(0, slash), var = v.name.substr(slash + 1);
    for (size_t i = 0; i < spec->layers.size(); ++i) {
      if (spec->layers[i].name != layer) continue;
      for (const auto& [suffix, in] : parsed.inits[i]) {
        if (suffix != var) continue;
        // An LSTM's forget biases stay 1 over the file's bias_initializer,
        // as unit_forget_bias makes them in Keras.
        const int64_t ones_begin = v.initializer.ones_begin, ones_end = v.initializer.ones_end;
        v.initializer = in;
        v.initializer.ones_begin = ones_begin;
        v.initializer.ones_end = ones_end;
      }
      for (const auto& [suffix, l1_l2] : parsed.penalties[i]) {
        if (suffix == var) std::tie(v.l1, v.l2) = l1_l2;
      }
    }
  }
}

// The activations' parameters where the file gives none: Keras's defaults
// for the activation functions (elu 1; leaky_relu 0.2, Keras 3's function;
// hard_sigmoid's slope 1/6 in Keras 3, 0.2 in Keras 2 and TensorFlow.js).
void DefaultActivationParameters(bool keras3, std::vector<LayerSpec>* specs) {
  for (LayerSpec& l : *specs) {
    if (l.alpha != 0.0f) continue;
    if (l.activation == Activation::kElu) l.alpha = 1.0f;
    if (l.activation == Activation::kLeakyRelu) l.alpha = 0.2f;
    if (l.activation == Activation::kHardSigmoid ||
        (IsRecurrent(l.kind) && l.recurrent_activation == Activation::kHardSigmoid)) {
      l.alpha = keras3 ? 1.0f / 6 : 0.2f;  // an LSTM's or GRU's gates' (its activation has none)
    }
  }
}

// Inserts `node` into the graph at index `at`: nodes reading index >= at
// read one further on, as do the outputs.
void InsertNode(ParsedLayers* parsed, int at, LayerSpec node) {
  for (LayerSpec& l : parsed->specs) {
    for (int& j : l.inputs) {
      if (j >= at) ++j;
    }
  }
  for (int& o : parsed->outputs) {
    if (o >= at) ++o;
  }
  parsed->specs.insert(parsed->specs.begin() + at, std::move(node));
  parsed->inits.insert(parsed->inits.begin() + at, keras::LayerInits());
  parsed->penalties.insert(parsed->penalties.begin() + at, keras::LayerPenalties());
}

// Inserts `node` after node `n`, reading it, and gives it n's readers:
// they read `node` instead (indices past n move on, as InsertNode's).
void InsertReaderOf(ParsedLayers* parsed, int n, LayerSpec node) {
  node.inputs = {n};
  InsertNode(parsed, n + 1, std::move(node));
  for (size_t i = n + 2; i < parsed->specs.size(); ++i) {
    for (int& j : parsed->specs[i].inputs) {
      if (j == n) j = n + 1;
    }
  }
}

// How many times other nodes read node `n`.
int ReadersOf(const std::vector<LayerSpec>& specs, int n) {
  int count = 0;
  for (const LayerSpec& l : specs) {
    count += static_cast<int>(std::count(l.inputs.begin(), l.inputs.end(), n));
  }
  return count;
}

// A model with several outputs made one whose last node joins the values
// each output's loss reads (a Concatenate, "(outputs)"): a sigmoid or
// softmax fused into a cross-entropy leaves its output's Dense linear
// (logits), the activation becoming a node of its own for other layers
// that read the output (ESMM's product of the click and conversion
// probabilities reads the click head's). The outputs, with their columns,
// go to *out.
absl::Status JoinOutputs(std::vector<keras::OutputLoss> losses, const std::string& source,
                         ParsedLayers* parsed, std::vector<OutputSpec>* out) {
  std::vector<LayerSpec>& specs = parsed->specs;
  std::vector<int> reads(parsed->outputs);  // the node each output's loss reads
  for (size_t k = 0; k < losses.size(); ++k) {
    keras::OutputLoss& o = losses[k];
    const int node = parsed->outputs[k];
    if (o.probabilities || !o.head.squashed) continue;
    const int tail = o.head.tail;
    if (tail >= 0) {
      // Activation(sigmoid) after the logits: the loss reads what it reads.
      if (ReadersOf(specs, tail) == 0) {
        specs[tail].activation = Activation::kNone;  // no other reader: a copy of the logits
      } else {
        reads[k] = specs[tail].inputs[0];
      }
      continue;
    }
    if (o.head.head != node) {
      return Bad(absl::StrCat(source, ": output '", parsed->output_names[k], "'"),
                 "a Dropout after a squashed (sigmoid or softmax) output is not supported");
    }
    const Activation act = specs[node].activation;
    specs[node].activation = Activation::kNone;
    if (ReadersOf(specs, node) == 0) continue;
    LayerSpec squash;
    squash.kind = act == Activation::kSoftmax ? LayerKind::kSoftmax : LayerKind::kActivation;
    squash.name = specs[node].name;
    squash.activation = act == Activation::kSoftmax ? Activation::kNone : act;
    squash.alpha = specs[node].alpha;
    InsertReaderOf(parsed, node, std::move(squash));
    for (size_t m = 0; m < losses.size(); ++m) {
      if (reads[m] > node) ++reads[m];
      if (losses[m].head.head > node) ++losses[m].head.head;
      if (losses[m].head.tail > node) ++losses[m].head.tail;
    }
  }
  LayerSpec join;
  join.kind = LayerKind::kConcatenate;
  join.name = "(outputs)";
  join.inputs = std::move(reads);
  specs.push_back(std::move(join));
  parsed->inits.emplace_back();
  parsed->penalties.emplace_back();
  for (size_t k = 0; k < losses.size(); ++k) {
    OutputSpec o;
    o.name = parsed->output_names[k];
    o.group.loss = losses[k].kind;
    o.group.weight = losses[k].weight;
    o.group.probabilities = losses[k].probabilities;
    out->push_back(std::move(o));
  }
  return absl::OkStatus();
}

// Every softmax activation that no loss reads fused (not at `fused`, the
// nodes whose softmax the loss takes in) made a Softmax node: an
// Activation layer becomes one, another layer (a Dense gate) loses its
// activation to a Softmax node after it, which its readers read.
void UnfuseSoftmaxes(std::vector<int> fused, ParsedLayers* parsed) {
  std::vector<LayerSpec>& specs = parsed->specs;
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    if (specs[i].activation != Activation::kSoftmax ||
        std::find(fused.begin(), fused.end(), i) != fused.end()) {
      continue;
    }
    specs[i].activation = Activation::kNone;
    if (specs[i].kind == LayerKind::kActivation) {
      specs[i].kind = LayerKind::kSoftmax;
      continue;
    }
    LayerSpec softmax;
    softmax.kind = LayerKind::kSoftmax;
    softmax.name = specs[i].name;
    InsertReaderOf(parsed, i, std::move(softmax));
    for (int& f : fused) {
      if (f > i) ++f;
    }
    ++i;  // past the new node
  }
}

// Each MultiHeadAttention node expanded as Keras computes it: Dense
// projections of the query, the key (the value when there is none) and the
// value to num_heads x key_dim (value_dim) features per step, named
// <layer>/query, /key and /value; an Attention node of num_heads heads
// with MultiHeadAttention's scale and masks (LayerSpec::multi_head),
// named <layer>; and the Dense <layer>/attention_output back to the
// query's features, which the layer's readers read. The variables are
// then <layer>/query/kernel [features, heads x key_dim], ..., the values
// of Keras's [features, heads, key_dim] in the same order. `inputs_only`:
// a spec of the model's inputs, for the shapes the projections read.
absl::Status ExpandMultiHeadAttention(const std::string& source, const ModelSpec& inputs_only,
                                      ParsedLayers* parsed) {
  for (int i = 0; i < static_cast<int>(parsed->specs.size()); ++i) {
    if (parsed->specs[i].kind != LayerKind::kMultiHeadAttention) continue;
    ModelSpec shaped = inputs_only;
    shaped.layers = parsed->specs;
    absl::StatusOr<std::vector<ActivationShape>> shapes = NodeShapes(shaped);
    if (!shapes.ok()) return Bad(source, std::string(shapes.status().message()));
    const LayerSpec mha = parsed->specs[i];
    const keras::LayerInits inits = parsed->inits[i];
    const int query = mha.inputs[0], value = mha.inputs[1];
    const int key = mha.inputs.size() == 3 ? mha.inputs[2] : value;
    const int features = query < 0 ? InputShapeOf(shaped, query).c : (*shapes)[query].c;
    auto dense = [&](const char* part, int units, int from) {
      LayerSpec d;
      d.kind = LayerKind::kDense;
      d.name = absl::StrCat(mha.name, "/", part);
      d.units = units;
      d.use_bias = mha.use_bias;
      d.inputs = {from};
      return d;
    };
    InsertNode(parsed, i, dense("query", mha.heads * mha.units, query));
    InsertNode(parsed, i + 1, dense("key", mha.heads * mha.units, key));
    InsertNode(parsed, i + 2, dense("value", mha.heads * mha.value_dim, value));
    LayerSpec core;
    core.kind = LayerKind::kAttention;
    core.name = mha.name;
    core.heads = mha.heads;
    core.multi_head = true;
    core.inputs = {i, i + 2, i + 1};  // [query, value, key]
    InsertNode(parsed, i + 3, std::move(core));
    parsed->specs[i + 4] = dense("attention_output", features, i + 3);
    for (int k = i; k <= i + 4; ++k) {
      if (k != i + 3) parsed->inits[k] = inits;
    }
    i += 4;
  }
  return absl::OkStatus();
}

// Each output's columns and targets from the built spec's shapes: every
// output must be flat.
absl::Status PlaceOutputColumns(const std::string& source, ModelSpec* spec) {
  absl::StatusOr<std::vector<ActivationShape>> shapes = NodeShapes(*spec);
  if (!shapes.ok()) return Bad(source, std::string(shapes.status().message()));
  const LayerSpec& join = spec->layers.back();
  int first = 0, targets = 0;
  for (size_t k = 0; k < spec->outputs.size(); ++k) {
    const int node = join.inputs[k];
    const ActivationShape& y = node < 0 ? InputShapeOf(*spec, node) : (*shapes)[node];
    if (y.h != 1 || y.w != 1) {
      return Bad(absl::StrCat(source, ": output '", spec->outputs[k].name, "'"),
                 absl::StrCat("is ", y.h, "x", y.w, "x", y.c,
                              " per example; an output must be flat ([units])"));
    }
    LossGroup& g = spec->outputs[k].group;
    g.first = first;
    g.width = y.c;
    g.targets_at = targets;
    first += y.c;
    targets += TargetsPerExample(g.loss, y.c);
  }
  spec->num_classes = first;
  return absl::OkStatus();
}

// ParseKerasModel's steps; nlohmann's exceptions pass through.
absl::StatusOr<ModelSpec> ParseKerasModelOrThrow(absl::string_view text,
                                                 const std::string& source,
                                                 const std::string& loss_flag) {
  absl::StatusOr<keras::ModelEnvelope> model = keras::ReadEnvelope(text, source);
  if (!model.ok()) return model.status();
  absl::StatusOr<ParsedLayers> parsed = keras::ParseLayers(*model, source);
  if (!parsed.ok()) return parsed.status();
  DefaultActivationParameters(model->keras3, &parsed->specs);
  keras::LossChoice loss;
  int classes = 0;  // several outputs: from their shapes, once built
  std::vector<OutputSpec> several;
  if (parsed->outputs.empty()) {
    absl::StatusOr<keras::LossChoice> chosen = keras::ChooseLoss(loss_flag, model->loss, source);
    if (!chosen.ok()) return chosen.status();
    loss = *chosen;
    keras::HeadInfo head;
    absl::StatusOr<int> outputs = keras::CheckOutput(parsed->specs, &loss, source, &head);
    if (!outputs.ok()) return outputs.status();
    classes = *outputs;
    UnfuseSoftmaxes({head.head, head.tail}, &*parsed);
  } else {
    absl::StatusOr<std::vector<keras::OutputLoss>> losses =
        keras::CheckOutputs(parsed->specs, parsed->outputs, parsed->output_names, loss_flag,
                            model->loss, model->loss_weights, source);
    if (!losses.ok()) return losses.status();
    if (absl::Status s = JoinOutputs(*std::move(losses), source, &*parsed, &several); !s.ok()) {
      return s;
    }
    UnfuseSoftmaxes({}, &*parsed);
  }
  absl::StatusOr<std::vector<InputSpec>> inputs = InputsOf(*parsed, source);
  if (!inputs.ok()) return inputs.status();
  // With several inputs the example's shape is theirs, end to end.
  absl::StatusOr<InputShape> in =
      inputs->empty() ? DeclaredInputShape(*parsed, source) : InputShape{1, 1, 1};
  if (!in.ok()) return in.status();
  ModelSpec inputs_only;
  inputs_only.name = model->model_name;
  inputs_only.input_height = in->h, inputs_only.input_width = in->w;
  inputs_only.input_channels = in->c;
  inputs_only.inputs = *inputs;
  if (!inputs->empty()) {
    int total = 0;
    for (const InputSpec& input : *inputs) total += static_cast<int>(input.size());
    inputs_only.input_channels = total;
  }
  if (absl::Status s = ExpandMultiHeadAttention(source, inputs_only, &*parsed); !s.ok()) {
    return s;
  }
  absl::StatusOr<ModelSpec> spec =
      BuildModelSpec(model->model_name, in->h, in->w, in->c, classes, std::move(parsed->specs),
                     *std::move(inputs));
  if (!spec.ok()) {
    return Bad(source, std::string(spec.status().message()));
  }
  ApplyVariableOptions(*parsed, &*spec);
  spec->loss = loss.kind;
  if (!several.empty()) {
    spec->outputs = std::move(several);
    if (absl::Status s = PlaceOutputColumns(source, &*spec); !s.ok()) return s;
  }
  if (spec->num_parameters > (int64_t{1} << 31)) {
    return Bad(source, absl::StrCat(spec->num_parameters, " parameters; at most 2^31"));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ParseKerasModel(absl::string_view text, const std::string& source,
                                          const std::string& loss) {
  // The parts check each value's type before they read it; a value of
  // another type that slips past them is a bad file all the same, never a
  // crash (nlohmann's type_error, out_of_range, ...).
  try {
    return ParseKerasModelOrThrow(text, source, loss);
  } catch (const nlohmann::json::exception& e) {
    return Bad(source, absl::StrCat("a value of the wrong type or out of range: ", e.what()));
  }
}

absl::StatusOr<ModelSpec> PlanModelSpec(const std::string& model,
                                        const std::string& model_json,
                                        const std::string& loss) {
  if (model_json.empty()) return ModelByName(model);
  return ParseKerasModel(model_json, model, loss);
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const BuiltinModel& m : BuiltinModels()) names.push_back(m.name);
  return names;
}

absl::StatusOr<std::string> ReadModelFile(const std::string& name_or_path) {
  for (const BuiltinModel& m : BuiltinModels()) {
    if (name_or_path == m.name) return std::string(m.json);
  }
  if (absl::EndsWith(name_or_path, ".keras")) {
    absl::StatusOr<std::unique_ptr<ZipArchive>> archive =
        ZipArchive::Open(name_or_path, "a .keras");
    if (!archive.ok()) return archive.status();
    if (!(*archive)->Has("config.json")) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_or_path, ": the archive has no config.json"));
    }
    return (*archive)->Read("config.json", uint64_t{64} << 20);
  }
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        name_or_path, ": cannot read it (not a built-in model: ",
        absl::StrJoin(BuiltinModelNames(), ", "), "; nor a readable .json or .keras file)"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pscluster
