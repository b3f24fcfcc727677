#include "compute/scoring.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compute/cpu_backend.h"
#include "model/dataset.h"
#include "model/sparse_layout.h"

namespace pscluster {

namespace {

// Output `o`'s metrics from every example's probabilities (or values),
// `outputs` per example, and targets, `per` per example.
OutputScore ScoreOutput(const OutputSpec& o, const std::vector<float>& probabilities,
                        const std::vector<float>& targets, int outputs, int per) {
  const LossGroup& g = o.group;
  const int64_t count = static_cast<int64_t>(targets.size()) / per;
  OutputScore s;
  s.name = o.name;
  s.kind = g.loss;
  std::vector<float> scores, labels;
  double loss = 0, right = 0;
  for (int64_t r = 0; r < count; ++r) {
    const float* p = &probabilities[r * outputs + g.first];
    const float* t = &targets[r * per + g.targets_at];
    switch (g.loss) {
      case LossKind::kSparseCategoricalCrossentropy:
      case LossKind::kCategoricalCrossentropy: {
        const bool sparse = g.loss == LossKind::kSparseCategoricalCrossentropy;
        int best = 0, want = sparse ? static_cast<int>(t[0]) : 0;
        for (int j = 1; j < g.width; ++j) {
          if (p[j] > p[best]) best = j;
          if (!sparse && t[j] > t[want]) want = j;
        }
        right += best == want ? 1 : 0;
        for (int j = 0; j < g.width; ++j) {
          const double tj = sparse ? (j == want ? 1.0 : 0.0) : t[j];
          if (tj != 0) loss -= tj * std::log(std::max(double{p[j]}, 1e-30));
        }
        break;
      }
      case LossKind::kBinaryCrossentropy:
        for (int j = 0; j < g.width; ++j) {
          const double c = std::min(std::max(double{p[j]}, 1e-7), 1.0 - 1e-7);
          loss -= (t[j] * std::log(c) + (1.0 - t[j]) * std::log(1.0 - c)) / g.width;
          right += (p[j] > 0.5f) == (t[j] > 0.5f) ? 1.0 / g.width : 0.0;
          scores.push_back(p[j]);
          labels.push_back(t[j]);
        }
        break;
      default:
        for (int j = 0; j < g.width; ++j) {
          const double d = double{p[j]} - t[j];
          loss += (g.loss == LossKind::kMeanSquaredError ? d * d : std::fabs(d)) / g.width;
        }
        break;
    }
  }
  s.loss = count > 0 ? loss / count : 0;
  s.accuracy = count > 0 ? right / count : 0;
  if (g.loss == LossKind::kBinaryCrossentropy) s.auc = RocAuc(scores, labels);
  return s;
}

}  // namespace

absl::Status ScoreOnDataset(ComputeBackend& backend, const ModelSpec& spec, const float* params,
                            const Dataset& data, TestScore* score) {
  if (data.count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot score on an empty data set (", data.count, " examples)"));
  }
  const size_t pixels = size_t(data.height) * data.width * data.channels;
  const bool several = !spec.outputs.empty();
  const bool binary = spec.loss == LossKind::kBinaryCrossentropy && !several;
  const bool keep = binary || several;  // each example's probabilities, for AUC or per output
  const int outputs = spec.num_classes;
  std::vector<float> probabilities, scores, labels;
  if (keep) probabilities.resize(size_t(kScoringBatch) * outputs);
  double loss_sum = 0;
  int64_t correct = 0;
  for (int begin = 0; begin < data.count; begin += kScoringBatch) {
    const int n = std::min(kScoringBatch, data.count - begin);
    double batch_loss = 0;
    int batch_correct = 0;
    const float* targets = &data.targets[begin * int64_t{data.targets_per_example}];
    const Batch b{&data.images[begin * pixels], targets, n};
    if (absl::Status s = backend.Evaluate(params, b, &batch_loss, &batch_correct,
                                          keep ? probabilities.data() : nullptr);
        !s.ok()) {
      return s;
    }
    loss_sum += batch_loss;
    correct += batch_correct;
    if (keep) {
      scores.insert(scores.end(), probabilities.begin(), probabilities.begin() + n * outputs);
      labels.insert(labels.end(), targets, targets + n * int64_t{data.targets_per_example});
    }
  }
  TestScore out;
  out.examples = data.count;
  out.loss = loss_sum / data.count;
  const bool regression = spec.loss == LossKind::kMeanSquaredError ||
                          spec.loss == LossKind::kMeanAbsoluteError;
  // Several outputs: each one's accuracy (OutputScore), none for the whole.
  out.accuracy =
      regression || several ? 0.0 : double(correct) / (double(data.count) * (binary ? outputs : 1));
  if (several) {
    for (const OutputSpec& o : spec.outputs) {
      out.outputs.push_back(ScoreOutput(o, scores, labels, outputs, data.targets_per_example));
    }
  } else if (binary) {
    out.auc = RocAuc(scores, labels);
  }
  *score = out;
  return absl::OkStatus();
}

std::string MetricsText(LossKind loss, double accuracy, double auc, double mean_loss,
                        const std::string& prefix) {
  switch (loss) {
    case LossKind::kMeanSquaredError:
      return absl::StrFormat("%smse=%.4f %sloss=%.4f", prefix, mean_loss, prefix, mean_loss);
    case LossKind::kMeanAbsoluteError:
      return absl::StrFormat("%smae=%.4f %sloss=%.4f", prefix, mean_loss, prefix, mean_loss);
    case LossKind::kBinaryCrossentropy:
      return absl::StrFormat("%saccuracy=%.4f %sauc=%.4f %sloss=%.4f", prefix, accuracy, prefix,
                             auc, prefix, mean_loss);
    default:
      return absl::StrFormat("%saccuracy=%.4f %sloss=%.4f", prefix, accuracy, prefix, mean_loss);
  }
}

std::string ScoreText(LossKind loss, double accuracy, double auc, double mean_loss,
                      const std::vector<OutputScore>& outputs, const std::string& prefix) {
  if (outputs.empty()) return MetricsText(loss, accuracy, auc, mean_loss, prefix);
  std::string text = absl::StrFormat("%sloss=%.4f", prefix, mean_loss);
  for (const OutputScore& o : outputs) {
    absl::StrAppend(&text, " ",
                    MetricsText(o.kind, o.accuracy, o.auc, o.loss, prefix + o.name + "_"));
  }
  return text;
}

namespace {

// `data`'s sparse table ids renumbered into windows (model/sparse_layout.h)
// and `params` (in `spec`'s layout) laid out for them in *windowed and
// *windowed_params; `data` holds the renumbered examples after.
absl::Status WindowTables(const ModelSpec& spec, const float* params, uint64_t seed,
                          Dataset* data, ModelSpec* windowed,
                          std::vector<float>* windowed_params) {
  absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(spec);
  if (!tables.ok()) return tables.status();
  if (absl::Status s = CheckIdsRead(*tables, data->ids_first, data->ids_per_example); !s.ok()) {
    return s;
  }
  const int64_t example_size = int64_t{data->height} * data->width * data->channels;
  RowWindow window(*tables);
  std::vector<float> mapped;
  const ExampleIds ids{data->ids.data(), data->ids_first, data->ids_per_example};
  if (absl::Status s = window.Map(data->images.data(), ids, data->count, example_size,
                                  int64_t{data->count} * example_size, &mapped);
      !s.ok()) {
    return s;
  }
  const int64_t rows = window.widest();
  std::vector<SparseTableInfo> laid = *tables;
  *windowed = WithSparseTables(spec, rows, &laid);
  windowed_params->assign(windowed->num_parameters, 0.0f);
  const auto variable = [](const ModelSpec& m, const std::string& name) {
    for (const VariableSpec& v : m.variables) {
      if (v.name == name) return &v;
    }
    return static_cast<const VariableSpec*>(nullptr);
  };
  for (const VariableSpec& v : windowed->variables) {
    if (v.table_rows != 0) continue;
    const VariableSpec* from = variable(spec, v.name);
    std::copy_n(params + from->offset, v.size, windowed_params->data() + v.offset);
  }
  for (size_t t = 0; t < laid.size(); ++t) {
    const SparseTableInfo& table = laid[t];
    const VariableSpec* from = variable(spec, table.variable);
    const std::vector<int64_t>& row_ids = from->row_ids;
    const std::vector<int64_t>& batch_ids = window.ids(static_cast<int>(t));
    for (size_t k = 0; k < batch_ids.size(); ++k) {
      const int64_t id = batch_ids[k];
      float* row = windowed_params->data() + table.offset + int64_t(k) * table.width;
      if (from->table_rows != kUnboundedTable) {  // whole: row id is the id's
        std::copy_n(params + from->offset + id * table.width, table.width, row);
        continue;
      }
      const auto it = std::lower_bound(row_ids.begin(), row_ids.end(), id);
      if (it != row_ids.end() && *it == id) {
        std::copy_n(params + from->offset + (it - row_ids.begin()) * table.width, table.width,
                    row);
      } else {
        InitialRow(from->initializer, from->fan_in, from->fan_out, seed, table.table, id,
                   table.width, row);
      }
    }
  }
  data->images = std::move(mapped);
  data->ids.clear();
  data->ids_per_example = 0;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestScore> ScoreTestSet(const ModelSpec& spec, const float* params,
                                       const std::string& data_dir, int threads, uint64_t seed) {
  absl::StatusOr<Dataset> test = LoadDataset(data_dir, Split::kTest, OutputNames(spec));
  if (!test.ok()) return test.status();
  if (absl::Status s = CheckDatasetFitsModel(*test, data_dir, spec); !s.ok()) return s;
  bool windowed = test->ids_per_example > 0;
  for (const VariableSpec& v : spec.variables) windowed |= v.table_rows == kUnboundedTable;
  const ModelSpec* scored = &spec;
  ModelSpec windowed_spec;
  std::vector<float> windowed_params;
  if (windowed) {
    if (absl::Status s =
            WindowTables(spec, params, seed, &*test, &windowed_spec, &windowed_params);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(data_dir, ": ", s.message()));
    }
    scored = &windowed_spec;
    params = windowed_params.data();
  }
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend =
      CreateCpuBackend(*scored, kScoringBatch, threads);
  if (!backend.ok()) return backend.status();
  TestScore score;
  if (absl::Status s = ScoreOnDataset(**backend, *scored, params, *test, &score); !s.ok()) {
    return s;
  }
  return score;
}

}  // namespace pscluster
