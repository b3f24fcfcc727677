#include "model/sparse_layout.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Where input `ref` (ModelInput(k)) lies in an example: first value, count.
SparseTableInfo::Columns InputColumns(const ModelSpec& spec, int ref) {
  const int64_t whole = int64_t{spec.input_height} * spec.input_width * spec.input_channels;
  if (spec.inputs.empty()) return {0, whole};
  const int k = ModelInputIndex(ref);
  int64_t first = 0;
  for (int i = 0; i < k; ++i) first += spec.inputs[i].size();
  return {first, spec.inputs[k].size()};
}

// Whether two tables read the same values, in any order of their uses.
bool SameColumns(std::vector<SparseTableInfo::Columns> a, std::vector<SparseTableInfo::Columns> b) {
  const auto by_first = [](const SparseTableInfo::Columns& x, const SparseTableInfo::Columns& y) {
    return x.first < y.first;
  };
  std::sort(a.begin(), a.end(), by_first);
  std::sort(b.begin(), b.end(), by_first);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].count != b[i].count) return false;
  }
  return true;
}

}  // namespace

int RowOwner(int table, int64_t id, int num_ps) {
  if (num_ps < 1) return 0;
  uint64_t z = (static_cast<uint64_t>(table) << 56) ^ static_cast<uint64_t>(id);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>(z % static_cast<uint64_t>(num_ps));
}

absl::StatusOr<std::vector<SparseTableInfo>> FindSparseTables(const ModelSpec& spec) {
  std::vector<SparseTableInfo> tables;
  for (const VariableSpec& v : spec.variables) {
    const std::string layer = v.name.substr(0, v.name.rfind('/'));
    bool embedding = false;
    SparseTableInfo t;
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      const LayerSpec& l = spec.layers[i];
      if (l.kind != LayerKind::kEmbedding || l.name != layer) continue;
      embedding = true;
      const int from = l.inputs.empty() ? static_cast<int>(i) - 1 : l.inputs[0];
      if (from >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Embedding layer '", l.name, "' reads the output of layer '",
            spec.layers[from].name,
            "'; a sparse table's ids must be a model input (or give the chief "
            "--dense_embeddings)"));
      }
      const SparseTableInfo::Columns c = InputColumns(spec, from);
      bool seen = false;  // a layer applied twice to one input
      for (const SparseTableInfo::Columns& d : t.columns) seen |= d.first == c.first;
      if (!seen) t.columns.push_back(c);
      t.width = l.units;
      t.input_dim = l.input_dim;
      t.mask_zero = l.mask_zero;
    }
    if (!embedding) continue;
    // Ids are renumbered in place: tables that read the same columns share
    // one numbering (RowWindow::Map); tables whose columns only overlap
    // cannot.
    for (const SparseTableInfo& other : tables) {
      if (SameColumns(other.columns, t.columns)) {
        if (other.mask_zero != t.mask_zero) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tables ", other.variable, " and ", v.name,
              " read the same ids but only one has mask_zero (their ids are numbered together); "
              "give both the same mask_zero (or give the chief --dense_embeddings)"));
        }
        continue;
      }
      for (const SparseTableInfo::Columns& a : other.columns) {
        for (const SparseTableInfo::Columns& b : t.columns) {
          if (a.first < b.first + b.count && b.first < a.first + a.count) {
            return absl::InvalidArgumentError(absl::StrCat(
                "tables ", other.variable, " and ", v.name,
                " read overlapping but different inputs; sparse tables need the same inputs or "
                "inputs of their own (or give the chief --dense_embeddings)"));
          }
        }
      }
    }
    t.table = static_cast<int>(tables.size());
    if (v.table_rows != 0) {  // a window already: the table's own rows
      t.input_dim = v.table_rows == kUnboundedTable ? 0 : v.table_rows;
      t.offset = v.offset;
    }
    t.variable = v.name;
    t.initializer = v.initializer;
    t.fan_in = v.fan_in;
    t.fan_out = v.fan_out;
    tables.push_back(std::move(t));
  }
  return tables;
}

ModelSpec WithSparseTables(const ModelSpec& spec, int64_t window,
                           std::vector<SparseTableInfo>* tables) {
  ModelSpec out = spec;
  int64_t offset = 0;
  for (VariableSpec& v : out.variables) {
    if (IsSparseTable(*tables, v.name)) continue;
    v.offset = offset;
    offset += v.size;
  }
  for (SparseTableInfo& t : *tables) {
    for (VariableSpec& v : out.variables) {
      if (v.name != t.variable) continue;
      v.table_rows = t.input_dim > 0 ? t.input_dim : kUnboundedTable;
      v.shape = {window, t.width};
      v.size = window * t.width;
      v.offset = offset;
      t.offset = offset;
      offset += v.size;
    }
    const std::string layer = t.variable.substr(0, t.variable.rfind('/'));
    for (LayerSpec& l : out.layers) {
      if (l.kind == LayerKind::kEmbedding && l.name == layer) {
        l.input_dim = static_cast<int>(window);
        if (l.mask_zero) l.padding_id = -1;  // RowWindow::Map's padding: negative
      }
    }
  }
  out.num_parameters = offset;
  return out;
}

absl::Status CheckIdsRead(const std::vector<SparseTableInfo>& tables, int first,
                          int per_example) {
  for (int64_t v = first; v < first + per_example; ++v) {
    bool read = false;
    for (const SparseTableInfo& t : tables) {
      for (const SparseTableInfo::Columns& c : t.columns) read |= v >= c.first && v < c.first + c.count;
    }
    if (!read) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value ", v, " of an example is an int64 id, but no sparse Embedding table reads it "
          "(ids of int64 data reach the model only through sparse tables: not with "
          "--dense_embeddings or multi_worker_mirrored)"));
    }
  }
  return absl::OkStatus();
}

void MakeUnbounded(std::vector<SparseTableInfo>* tables) {
  for (SparseTableInfo& t : *tables) t.input_dim = 0;
}

bool IsSparseTable(const std::vector<SparseTableInfo>& tables, const std::string& name) {
  for (const SparseTableInfo& t : tables) {
    if (t.variable == name) return true;
  }
  return false;
}

RowWindow::RowWindow(std::vector<SparseTableInfo> tables) : tables_(std::move(tables)) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    size_t same = 0;
    while (same < t && !SameColumns(tables_[same].columns, tables_[t].columns)) ++same;
    numbering_.push_back(same);
  }
  ids_.resize(tables_.size());  // no ids before the first Map
}

int64_t RowWindow::widest() const {
  int64_t rows = 1;
  for (const std::vector<int64_t>& ids : ids_) rows = std::max<int64_t>(rows, ids.size());
  return rows;
}

absl::Status RowWindow::Map(const float* examples, const ExampleIds& given, int n,
                            int64_t example_size, int64_t window, std::vector<float>* out) {
  out->assign(examples, examples + int64_t{n} * example_size);
  ids_.resize(tables_.size());
  index_.resize(tables_.size());
  const auto outside = [](const SparseTableInfo& table) {
    return table.input_dim > 0 ? absl::StrCat("[0, input_dim = ", table.input_dim, ")")
                               : std::string("[0, 2^63) (unbounded)");
  };
  for (size_t t = 0; t < tables_.size(); ++t) {
    const SparseTableInfo& table = tables_[t];
    std::vector<int64_t>& ids = ids_[t];
    absl::flat_hash_map<int64_t, int64_t>& index = index_[t];
    ids.clear();
    index.clear();
    // A table reading what an earlier one read (rewritten already) shares
    // its numbering: only its input_dim is checked.
    if (const size_t same = numbering_[t]; same != t) {
      for (const int64_t id : ids_[same]) {
        if (table.input_dim > 0 && id >= table.input_dim) {
          return absl::InvalidArgumentError(absl::StrCat("id ", id, " of the batch is outside ",
                                                         outside(table), " of table ",
                                                         table.variable));
        }
      }
      continue;
    }
    // Float ids above 2^63 (or unbounded tables' beyond) cannot be int64s.
    const float float_limit =
        table.input_dim > 0 ? static_cast<float>(table.input_dim) : 9.2e18f;
    for (int e = 0; e < n; ++e) {
      for (const SparseTableInfo::Columns& c : table.columns) {
        float* x = out->data() + int64_t{e} * example_size + c.first;
        for (int64_t j = 0; j < c.count; ++j) {
          const int64_t at = c.first + j - given.first;  // among the int64 ids
          int64_t id;
          if (given.ids != nullptr && at >= 0 && at < given.per_example) {
            id = given.ids[int64_t{e} * given.per_example + at];
            if (id < 0 || (table.input_dim > 0 && id >= table.input_dim)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "int64 id ", id, " (value ", c.first + j, " of example ", e,
                  " of the batch) is outside ", outside(table), " of table ", table.variable,
                  id >= 0 ? " (ids of any size: give the chief --embedding_unbounded)" : ""));
            }
          } else {
            const float f = x[j];
            // Keras casts ids to int: a fraction is cut off.
            if (!(f >= 0.0f) || !(f < float_limit)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "id ", f, " (value ", c.first + j, " of example ", e,
                  " of the batch) is outside ", outside(table), " of table ", table.variable));
            }
            id = static_cast<int64_t>(f);
          }
          auto [it, added] = index.try_emplace(id, static_cast<int64_t>(ids.size()));
          if (added) {
            if (static_cast<int64_t>(ids.size()) == window) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "the batch names more than ", window, " distinct ids of table ",
                  table.variable));
            }
            ids.push_back(id);
          }
          // Padding (a masked table's id 0) has a row, as in Keras, and is
          // written -(row + 1): the mask is the sign (Embedding's padding_id).
          x[j] = table.mask_zero && id == 0 ? -static_cast<float>(it->second + 1)
                                            : static_cast<float>(it->second);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pscluster
