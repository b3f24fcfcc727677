#include "model/keras_graph.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {
namespace keras {
namespace {

// A tensor a Functional layer reads: the `node`-th application of layer
// `layer` (Keras's [name, node_index, tensor_index]).
struct TensorRef {
  std::string layer;
  int node = 0;
};

// The tensors each application (inbound node) of `layer` reads, in a
// Functional config: Keras 2 and TensorFlow.js write a node as a list of
// [name, node_index, tensor_index, kwargs], Keras 3 as {"args": [...],
// "kwargs": {...}} holding "keras_history": [name, node_index,
// tensor_index]. Layers with several outputs (tensor_index > 0) are refused.
absl::StatusOr<std::vector<std::vector<TensorRef>>> InboundNodes(const json& layer,
                                                                 const std::string& where) {
  std::vector<std::vector<TensorRef>> nodes;
  if (!layer.contains("inbound_nodes") || !layer["inbound_nodes"].is_array()) return nodes;
  absl::Status st;
  std::function<void(const json&, std::vector<TensorRef>*)> walk =
      [&](const json& j, std::vector<TensorRef>* out) {
        const json* history = nullptr;
        if (j.is_object() && j.contains("keras_history") && j["keras_history"].is_array()) {
          history = &j["keras_history"];
        } else if (j.is_array() && j.size() >= 3 && j[0].is_string() && j[1].is_number_integer() &&
                   j[2].is_number_integer()) {
          history = &j;
        }
        if (history != nullptr) {
          const json& h = *history;
          if (h.size() < 3 || !h[0].is_string() || !h[1].is_number_integer() ||
              !h[2].is_number_integer()) {
            st.Update(Bad(
                where, absl::StrCat("inbound tensor ", Show(h), " is not [name, node, tensor]")));
          } else if (h[2].get<int>() != 0) {
            st.Update(Bad(where, absl::StrCat("reads output ", h[2].get<int>(), " of layer '",
                                              h[0].get<std::string>(),
                                              "': layers with several outputs are not supported")));
          } else {
            out->push_back({h[0].get<std::string>(), h[1].get<int>()});
          }
          return;
        }
        if (j.is_object()) {
          for (const char* call_option : {"use_causal_mask", "return_attention_scores"}) {
            if (j.contains(call_option) && j[call_option] == true) {
              st.Update(Bad(where, absl::StrCat("call argument '", call_option,
                                                "' = true is not supported")));
            }
          }
          for (const auto& [k, v] : j.items()) walk(v, out);
        } else if (j.is_array()) {
          for (const json& v : j) walk(v, out);
        }
      };
  for (const json& node : layer["inbound_nodes"]) {
    std::vector<TensorRef> refs;
    walk(node, &refs);
    nodes.push_back(std::move(refs));
  }
  if (!st.ok()) return st;
  return nodes;
}

// The model's output tensors: config.output_layers, [[name, node,
// tensor], ...] or [name, node, tensor] (one); absent, the last layer's
// last node.
absl::StatusOr<std::vector<TensorRef>> OutputTensors(const json& config, const json& layers,
                                                     const std::string& source) {
  if (config.is_object() && config.contains("output_layers")) {
    json outs = config["output_layers"];
    if (!(outs.is_array() && !outs.empty() && outs[0].is_array())) outs = json::array({outs});
    if (outs.size() > static_cast<size_t>(kMaxOutputs)) {
      return Bad(source, absl::StrCat("output_layers ", Show(config["output_layers"]), ": ",
                                      outs.size(), " outputs; at most ", kMaxOutputs));
    }
    std::vector<TensorRef> refs;
    for (const json& out : outs) {
      if (!out.is_array() || out.size() < 2 || !out[0].is_string() || !out[1].is_number_integer()) {
        return Bad(source,
                   absl::StrCat("output_layers ", Show(out), " is not [name, node, tensor]"));
      }
      refs.push_back(TensorRef{out[0].get<std::string>(), out[1].get<int>()});
    }
    return refs;
  }
  const json& last = layers.back();
  TensorRef ref;
  ref.layer = last.contains("config") && last["config"].contains("name")
                  ? last["config"]["name"].get<std::string>()
                  : "";
  ref.node = last.contains("inbound_nodes") && last["inbound_nodes"].is_array()
                 ? std::max(0, static_cast<int>(last["inbound_nodes"].size()) - 1)
                 : 0;
  return std::vector<TensorRef>{ref};
}

// One layer of the file, its options parsed.
struct FileLayer {
  std::string name, where;
  std::vector<json> shape;  // an InputLayer's declared shape, if any
  LayerOptions options;
  std::vector<std::vector<TensorRef>> nodes;  // Functional: its applications
};

// Every layer of the file: its class and name, the first declared input
// shape, its options and, in a Functional model, what each application
// reads.
absl::StatusOr<std::vector<FileLayer>> ReadLayers(const ModelEnvelope& model,
                                                  const std::string& source,
                                                  ParsedLayers* parsed) {
  const json& layers = model.layers;
  std::vector<FileLayer> out;
  std::set<std::string> names;
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& layer = layers[i];
    if (!layer.is_object() || !layer.contains("class_name") ||
        !layer["class_name"].is_string()) {
      return Bad(source, absl::StrCat("layer ", i, " has no class_name"));
    }
    const std::string type = layer["class_name"].get<std::string>();
    const json cfg = layer.contains("config") && layer["config"].is_object() ? layer["config"]
                                                                             : json::object();
    FileLayer f;
    f.name = cfg.contains("name") && cfg["name"].is_string() ? cfg["name"].get<std::string>()
                                                             : absl::StrCat(type, "_", i);
    f.where = absl::StrCat(source, ": layer '", f.name, "' (", type, ")");
    if (!names.insert(f.name).second) return Bad(f.where, "the layer name is used twice");
    if (f.name.empty() || f.name.find('/') != std::string::npos) {
      return Bad(f.where, "layer names must be non-empty and hold no '/'");
    }
    if (model.functional) {
      absl::StatusOr<std::vector<std::vector<TensorRef>>> nodes = InboundNodes(layer, f.where);
      if (!nodes.ok()) return nodes.status();
      f.nodes = *std::move(nodes);
    }
    if (!parsed->have_shape) parsed->have_shape = DeclaredShape(layer, cfg, &parsed->shape);
    if (type == "InputLayer") DeclaredShape(layer, cfg, &f.shape);
    if (absl::Status s = ParseLayerOptions(type, cfg, f.name, f.where, &f.options); !s.ok()) {
      return s;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The model's input order (what fit's list of arrays follows): its
// input_layers, [[name, node, tensor], ...] (Keras 3: [name, node,
// tensor] for one), else the InputLayers' order in the file.
absl::StatusOr<std::vector<std::string>> InputOrder(const ModelEnvelope& model,
                                                    const std::string& source,
                                                    const std::vector<FileLayer>& layers) {
  std::vector<std::string> inputs;  // the InputLayers, in file order
  for (const FileLayer& l : layers) {
    if (l.options.input) inputs.push_back(l.name);
  }
  if (inputs.size() <= 1 || !model.config.contains("input_layers")) return inputs;
  json order = model.config["input_layers"];
  if (order.is_array() && !order.empty() && order[0].is_string()) order = json::array({order});
  std::vector<std::string> named;
  for (const json& ref : order.is_array() ? order : json::array()) {
    if (ref.is_array() && !ref.empty() && ref[0].is_string()) {
      named.push_back(ref[0].get<std::string>());
    }
  }
  std::vector<std::string> sorted_named = named, sorted_inputs = inputs;
  std::sort(sorted_named.begin(), sorted_named.end());
  std::sort(sorted_inputs.begin(), sorted_inputs.end());
  if (sorted_named != sorted_inputs) {
    return Bad(source, absl::StrCat("input_layers ", Show(model.config["input_layers"]),
                                    " do not name the model's InputLayers [",
                                    absl::StrJoin(inputs, ", "), "] once each"));
  }
  return named;
}

// A node of the graph: (layer, application); (ModelInput(k), 0) is the
// model's input k.
using NodeKey = std::pair<int, int>;

// The file's layers by name, and each InputLayer's place in the model's
// input order.
struct LayerIndex {
  const std::vector<FileLayer>& layers;
  std::map<std::string, int> by_name;
  std::map<std::string, int> input_index;
};

// The node that `ref` names; `where` starts the error when there is none.
absl::StatusOr<NodeKey> Resolve(const LayerIndex& index, const TensorRef& ref,
                                const std::string& where) {
  auto it = index.by_name.find(ref.layer);
  if (it == index.by_name.end()) {
    return Bad(where, absl::StrCat("reads layer '", ref.layer, "', which the model lacks"));
  }
  const FileLayer& from = index.layers[it->second];
  if (from.options.input) return NodeKey{ModelInput(index.input_index.at(from.name)), 0};
  if (ref.node < 0 || ref.node >= static_cast<int>(from.nodes.size())) {
    return Bad(where, absl::StrCat("reads application ", ref.node, " of layer '", ref.layer,
                                   "', which has ", from.nodes.size()));
  }
  return NodeKey{it->second, ref.node};
}

// What each node that the outputs depend on reads, found from them back.
absl::StatusOr<std::map<NodeKey, std::vector<NodeKey>>> NodeReads(
    const LayerIndex& index, const std::vector<NodeKey>& outputs) {
  std::map<NodeKey, std::vector<NodeKey>> reads;
  std::vector<NodeKey> todo = outputs;
  while (!todo.empty()) {
    const NodeKey k = todo.back();
    todo.pop_back();
    if (k.first < 0 || reads.count(k)) continue;
    const FileLayer& l = index.layers[k.first];
    std::vector<NodeKey>& in = reads[k];
    for (const TensorRef& ref : l.nodes[k.second]) {
      absl::StatusOr<NodeKey> from = Resolve(index, ref, l.where);
      if (!from.ok()) return from.status();
      in.push_back(*from);
      todo.push_back(*from);
    }
    if (in.empty()) return Bad(l.where, "reads nothing");
  }
  return reads;
}

// Appends the nodes of `reads` to `parsed`, each after what it reads,
// ordered by file position among those ready (a chain keeps the file's
// order); InvalidArgument starting with `source` for a cycle. With
// several `outputs`, their nodes' indices go to parsed->outputs.
absl::Status PlaceNodes(const std::vector<FileLayer>& layers,
                        const std::map<NodeKey, std::vector<NodeKey>>& reads,
                        const std::vector<NodeKey>& outputs, const std::string& source,
                        ParsedLayers* parsed) {
  std::map<NodeKey, int> waiting;                 // inputs not yet placed
  std::map<NodeKey, std::vector<NodeKey>> users;  // who reads a node
  std::set<NodeKey> ready;
  for (const auto& [k, in] : reads) {
    int n = 0;
    for (const NodeKey& from : in) {
      if (from.first < 0) continue;
      users[from].push_back(k);
      ++n;
    }
    waiting[k] = n;
    if (n == 0) ready.insert(k);
  }
  std::map<NodeKey, int> index;
  while (!ready.empty()) {
    const NodeKey k = *ready.begin();
    ready.erase(ready.begin());
    const FileLayer& l = layers[k.first];
    LayerSpec spec = l.options.spec;
    for (const NodeKey& from : reads.at(k)) {
      spec.inputs.push_back(from.first < 0 ? from.first : index.at(from));
    }
    index[k] = static_cast<int>(parsed->specs.size());
    parsed->specs.push_back(std::move(spec));
    parsed->inits.push_back(l.options.inits);
    parsed->penalties.push_back(l.options.penalties);
    for (const NodeKey& user : users[k]) {
      if (--waiting[user] == 0) ready.insert(user);
    }
  }
  if (parsed->specs.size() != reads.size()) {
    return Bad(source, "the layers' graph has a cycle");
  }
  for (const NodeKey& k : outputs) {
    if (outputs.size() > 1) parsed->outputs.push_back(index.at(k));
  }
  return absl::OkStatus();
}

// A Functional model's graph as nodes in an order where each comes after
// what it reads: the applications that the output depends on.
absl::Status PlanFunctionalNodes(const ModelEnvelope& model, const std::string& source,
                                 const std::vector<FileLayer>& layers, ParsedLayers* parsed) {
  LayerIndex index{layers, {}, {}};
  for (size_t i = 0; i < layers.size(); ++i) index.by_name[layers[i].name] = static_cast<int>(i);
  absl::StatusOr<std::vector<std::string>> inputs = InputOrder(model, source, layers);
  if (!inputs.ok()) return inputs.status();
  for (size_t k = 0; k < inputs->size(); ++k) {
    index.input_index[(*inputs)[k]] = static_cast<int>(k);
  }
  if (inputs->size() > 1) {
    for (const std::string& name : *inputs) {
      const FileLayer& l = layers[index.by_name.at(name)];
      if (l.shape.empty()) return Bad(l.where, "no declared shape (batch_shape)");
      parsed->inputs.emplace_back(name, l.shape);
    }
  }
  absl::StatusOr<std::vector<TensorRef>> outputs =
      OutputTensors(model.config, model.layers, source);
  if (!outputs.ok()) return outputs.status();
  std::vector<NodeKey> out_keys;
  for (const TensorRef& output : *outputs) {
    absl::StatusOr<NodeKey> out_key = Resolve(index, output, source);
    if (!out_key.ok()) return out_key.status();
    if (out_key->first < 0) return Bad(source, "the model's output is its input");
    if (std::find(out_keys.begin(), out_keys.end(), *out_key) != out_keys.end()) {
      return Bad(source, absl::StrCat("output_layers name layer '", output.layer,
                                      "' twice: each output must be a tensor of its own"));
    }
    out_keys.push_back(*out_key);
    if (outputs->size() > 1) parsed->output_names.push_back(output.layer);
  }
  absl::StatusOr<std::map<NodeKey, std::vector<NodeKey>>> reads = NodeReads(index, out_keys);
  if (!reads.ok()) return reads.status();
  return PlaceNodes(layers, *reads, out_keys, source, parsed);
}

}  // namespace

absl::StatusOr<ParsedLayers> ParseLayers(const ModelEnvelope& model, const std::string& source) {
  ParsedLayers out;
  absl::StatusOr<std::vector<FileLayer>> layers = ReadLayers(model, source, &out);
  if (!layers.ok()) return layers.status();
  if (model.functional) {
    if (absl::Status s = PlanFunctionalNodes(model, source, *layers, &out); !s.ok()) return s;
    return out;
  }
  for (FileLayer& l : *layers) {  // Sequential: a chain in file order
    if (l.options.input) continue;
    out.specs.push_back(std::move(l.options.spec));
    out.inits.push_back(std::move(l.options.inits));
    out.penalties.push_back(std::move(l.options.penalties));
  }
  if (out.specs.empty()) return Bad(source, "the model has no layers but its input");
  return out;
}

}  // namespace keras
}  // namespace pscluster
