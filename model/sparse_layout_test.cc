// model/sparse_layout: which variables are sparse tables and where their
// ids are, the window that stands for a table after the dense variables
// (and that the placement skips), RowWindow's renumbering and refusals,
// RowOwner's spread; and InitialParameters making a table row by row with
// InitialRow, as the ps make a sparse table's rows.
#include "model/sparse_layout.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "model/placement.h"

namespace pscluster {
namespace {

// A Functional model of three inputs, as deploy/models/ctr_wide_deep.json
// is made: dense [2], ids_a [3] and ids_b [2] (in that order in an
// example); emb_a (50 x 3) reads ids_a and emb_b (20 x 2) reads ids_b, each
// flattened, concatenated after the dense features, then hidden (Dense 4,
// relu) and click (Dense 1, sigmoid).
constexpr char kTwoTables[] = R"({"class_name": "Functional", "config": {"name": "two",
  "layers": [
    {"name": "dense", "class_name": "InputLayer",
     "config": {"batch_input_shape": [null, 2], "dtype": "float32", "name": "dense"},
     "inbound_nodes": []},
    {"name": "ids_a", "class_name": "InputLayer",
     "config": {"batch_input_shape": [null, 3], "dtype": "float32", "name": "ids_a"},
     "inbound_nodes": []},
    {"name": "ids_b", "class_name": "InputLayer",
     "config": {"batch_input_shape": [null, 2], "dtype": "float32", "name": "ids_b"},
     "inbound_nodes": []},
    {"name": "emb_a", "class_name": "Embedding",
     "config": {"name": "emb_a", "input_dim": 50, "output_dim": 3,
                "embeddings_initializer": {"class_name": "RandomUniform",
                                           "config": {"minval": -0.1, "maxval": 0.1}}},
     "inbound_nodes": [[["ids_a", 0, 0, {}]]]},
    {"name": "emb_b", "class_name": "Embedding",
     "config": {"name": "emb_b", "input_dim": 20, "output_dim": 2,
                "embeddings_initializer": {"class_name": "RandomNormal",
                                           "config": {"mean": 0.0, "stddev": 0.3}}},
     "inbound_nodes": [[["ids_b", 0, 0, {}]]]},
    {"name": "flat_a", "class_name": "Flatten", "config": {"name": "flat_a"},
     "inbound_nodes": [[["emb_a", 0, 0, {}]]]},
    {"name": "flat_b", "class_name": "Flatten", "config": {"name": "flat_b"},
     "inbound_nodes": [[["emb_b", 0, 0, {}]]]},
    {"name": "features", "class_name": "Concatenate", "config": {"name": "features", "axis": -1},
     "inbound_nodes": [[["dense", 0, 0, {}], ["flat_a", 0, 0, {}], ["flat_b", 0, 0, {}]]]},
    {"name": "hidden", "class_name": "Dense",
     "config": {"name": "hidden", "units": 4, "activation": "relu"},
     "inbound_nodes": [[["features", 0, 0, {}]]]},
    {"name": "click", "class_name": "Dense",
     "config": {"name": "click", "units": 1, "activation": "sigmoid"},
     "inbound_nodes": [[["hidden", 0, 0, {}]]]}],
  "input_layers": [["dense", 0, 0], ["ids_a", 0, 0], ["ids_b", 0, 0]],
  "output_layers": [["click", 0, 0]]}})";

// A Keras 3 Sequential model over ids [5]: emb (11 x 3),
// GlobalAveragePooling1D, a softmax Dense of 2. `before` is put between
// the input and the Embedding.
std::string Sequential(const std::string& before = "") {
  return absl::StrCat(R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [
      {"class_name": "InputLayer", "config": {"name": "ids", "batch_shape": [null, 5],
                                              "dtype": "int32"}},)",
                      before, R"(
      {"class_name": "Embedding", "config": {"name": "emb", "input_dim": 11, "output_dim": 3}},
      {"class_name": "GlobalAveragePooling1D", "config": {"name": "gap",
                                                          "data_format": "channels_last"}},
      {"class_name": "Dense", "config": {"name": "out", "units": 2,
                                         "activation": "softmax"}}]}})");
}

ModelSpec Parse(const std::string& text) {
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text, "test.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec();
}

std::vector<SparseTableInfo> Tables(const ModelSpec& spec) {
  absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(spec);
  EXPECT_TRUE(tables.ok()) << tables.status();
  return tables.ok() ? *tables : std::vector<SparseTableInfo>();
}

const VariableSpec* Variable(const ModelSpec& spec, const std::string& name) {
  for (const VariableSpec& v : spec.variables) {
    if (v.name == name) return &v;
  }
  ADD_FAILURE() << "no variable " << name;
  return nullptr;
}

TEST(FindSparseTablesTest, FindsEachTableWithItsColumnsWidthAndInputDim) {
  const ModelSpec spec = Parse(kTwoTables);
  const std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 2u);
  // In variable order, numbered 0, 1.
  int order_a = -1, order_b = -1;
  for (size_t i = 0; i < spec.variables.size(); ++i) {
    if (spec.variables[i].name == "emb_a/embeddings") order_a = static_cast<int>(i);
    if (spec.variables[i].name == "emb_b/embeddings") order_b = static_cast<int>(i);
  }
  ASSERT_GE(order_a, 0);
  ASSERT_GE(order_b, 0);
  const SparseTableInfo& a = tables[order_a < order_b ? 0 : 1];
  const SparseTableInfo& b = tables[order_a < order_b ? 1 : 0];
  EXPECT_EQ(tables[0].table, 0);
  EXPECT_EQ(tables[1].table, 1);

  EXPECT_EQ(a.variable, "emb_a/embeddings");
  EXPECT_EQ(a.width, 3);
  EXPECT_EQ(a.input_dim, 50);
  ASSERT_EQ(a.columns.size(), 1u);
  EXPECT_EQ(a.columns[0].first, 2);  // after the 2 dense features
  EXPECT_EQ(a.columns[0].count, 3);
  EXPECT_EQ(a.initializer.kind, Initializer::Kind::kRandomUniform);
  EXPECT_EQ(a.fan_in, Variable(spec, a.variable)->fan_in);
  EXPECT_EQ(a.fan_out, Variable(spec, a.variable)->fan_out);

  EXPECT_EQ(b.variable, "emb_b/embeddings");
  EXPECT_EQ(b.width, 2);
  EXPECT_EQ(b.input_dim, 20);
  ASSERT_EQ(b.columns.size(), 1u);
  EXPECT_EQ(b.columns[0].first, 5);
  EXPECT_EQ(b.columns[0].count, 2);
  EXPECT_EQ(b.initializer.kind, Initializer::Kind::kRandomNormal);

  EXPECT_TRUE(IsSparseTable(tables, "emb_a/embeddings"));
  EXPECT_TRUE(IsSparseTable(tables, "emb_b/embeddings"));
  EXPECT_FALSE(IsSparseTable(tables, "hidden/kernel"));
}

TEST(FindSparseTablesTest, ASequentialModelsTableReadsTheWholeExample) {
  const std::vector<SparseTableInfo> tables = Tables(Parse(Sequential()));
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].variable, "emb/embeddings");
  EXPECT_EQ(tables[0].width, 3);
  EXPECT_EQ(tables[0].input_dim, 11);
  ASSERT_EQ(tables[0].columns.size(), 1u);
  EXPECT_EQ(tables[0].columns[0].first, 0);
  EXPECT_EQ(tables[0].columns[0].count, 5);
}

TEST(FindSparseTablesTest, AnEmbeddingReadingALayersOutputIsRefusedNamingTheLayer) {
  const ModelSpec spec = Parse(Sequential(
      R"({"class_name": "Rescaling", "config": {"name": "shift", "scale": 1.0,
                                                 "offset": 0.0}},)"));
  ASSERT_FALSE(spec.layers.empty());
  absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(spec);
  ASSERT_FALSE(tables.ok());
  EXPECT_EQ(tables.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tables.status().message().find("'emb'"), std::string::npos) << tables.status();
  EXPECT_NE(tables.status().message().find("'shift'"), std::string::npos) << tables.status();
}

TEST(WithSparseTablesTest, TheWindowsComeAfterEveryDenseVariable) {
  const ModelSpec spec = Parse(kTwoTables);
  std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 2u);
  constexpr int64_t kWindow = 7;
  const ModelSpec out = WithSparseTables(spec, kWindow, &tables);
  ASSERT_EQ(out.variables.size(), spec.variables.size());

  // The dense variables: contiguous from 0, in the model's order.
  int64_t dense = 0;
  for (size_t i = 0; i < out.variables.size(); ++i) {
    const VariableSpec& v = out.variables[i];
    EXPECT_EQ(v.name, spec.variables[i].name);
    if (IsSparseTable(tables, v.name)) continue;
    EXPECT_EQ(v.offset, dense) << v.name;
    EXPECT_EQ(v.size, spec.variables[i].size) << v.name;
    EXPECT_EQ(v.shape, spec.variables[i].shape) << v.name;
    EXPECT_EQ(v.table_rows, 0) << v.name;
    dense += v.size;
  }
  EXPECT_EQ(dense, spec.num_parameters - 50 * 3 - 20 * 2);

  // Then the windows, in table order.
  int64_t offset = dense;
  for (const SparseTableInfo& t : tables) {
    EXPECT_EQ(t.offset, offset) << t.variable;
    const VariableSpec* v = Variable(out, t.variable);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->offset, offset);
    EXPECT_EQ(v->shape, (std::vector<int64_t>{kWindow, t.width}));
    EXPECT_EQ(v->size, kWindow * t.width);
    EXPECT_EQ(v->table_rows, t.input_dim);
    offset += kWindow * t.width;
  }
  EXPECT_EQ(out.num_parameters, dense + kWindow * (3 + 2));
  EXPECT_EQ(Variable(out, "emb_a/embeddings")->table_rows, 50);
  EXPECT_EQ(Variable(out, "emb_b/embeddings")->table_rows, 20);
  for (const LayerSpec& l : out.layers) {
    if (l.kind == LayerKind::kEmbedding) {
      EXPECT_EQ(l.input_dim, kWindow) << l.name;
    }
  }

  // The windowed spec's tables are the model's: the real input_dim, and
  // the window's offset.
  const std::vector<SparseTableInfo> again = Tables(out);
  ASSERT_EQ(again.size(), tables.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].variable, tables[i].variable);
    EXPECT_EQ(again[i].input_dim, tables[i].input_dim);
    EXPECT_EQ(again[i].width, tables[i].width);
    EXPECT_EQ(again[i].offset, tables[i].offset);
    ASSERT_EQ(again[i].columns.size(), tables[i].columns.size());
    EXPECT_EQ(again[i].columns[0].first, tables[i].columns[0].first);
    EXPECT_EQ(again[i].columns[0].count, tables[i].columns[0].count);
  }
}

TEST(WithSparseTablesTest, ThePlacementSkipsTheWindowWhateverItsSize) {
  const ModelSpec spec = Parse(kTwoTables);
  std::vector<SparseTableInfo> one = Tables(spec);
  std::vector<SparseTableInfo> many = one;
  const ModelSpec small = WithSparseTables(spec, 1, &one);
  const ModelSpec large = WithSparseTables(spec, 1000, &many);
  for (int num_ps : {1, 2, 3}) {
    const Placement a = PlaceVariables(small, num_ps);
    const Placement b = PlaceVariables(large, num_ps);
    EXPECT_EQ(a.fingerprint, b.fingerprint) << num_ps << " ps";
    int64_t placed = 0;
    for (const Shard& s : a.shards) {
      EXPECT_FALSE(IsSparseTable(one, s.variable)) << s.variable;
      placed += s.size;
    }
    for (const Shard& s : b.shards) EXPECT_FALSE(IsSparseTable(many, s.variable)) << s.variable;
    EXPECT_EQ(placed, one[0].offset) << "the dense variables, all of them";
    int64_t held = 0;
    for (int64_t f : b.floats_of_ps) held += f;
    EXPECT_EQ(held, many[0].offset);
  }
}

// Examples of kTwoTables: dense [2], ids_a [3], ids_b [2].
constexpr int64_t kExample = 7;

TEST(RowWindowTest, RenumbersIdsInOrderOfFirstAppearancePerTable) {
  const ModelSpec spec = Parse(kTwoTables);
  std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 2u);
  const bool a_first = tables[0].variable == "emb_a/embeddings";
  const int ta = a_first ? 0 : 1, tb = a_first ? 1 : 0;
  RowWindow window(tables);
  // Dense features outside any table's range, and fractions, stay as they are.
  const std::vector<float> examples = {
      0.5f, 99.0f, 7, 3, 7, 19, 4,     //
      -2.5f, 1e9f, 3, 49, 12, 4, 0,    //
      0.25f, 50.0f, 0, 7, 3, 19, 19};  //
  std::vector<float> out;
  absl::Status s = window.Map(examples.data(), 3, kExample, 5, &out);
  ASSERT_TRUE(s.ok()) << s;
  // ids_a: 7, 3, 49, 12, 0 -> 0..4; ids_b: 19, 4, 0 -> 0..2.
  const std::vector<float> expect = {
      0.5f, 99.0f, 0, 1, 0, 0, 1,     //
      -2.5f, 1e9f, 1, 2, 3, 1, 2,     //
      0.25f, 50.0f, 4, 0, 1, 0, 0};  //
  EXPECT_EQ(out, expect);
  EXPECT_EQ(window.ids(ta), (std::vector<int64_t>{7, 3, 49, 12, 0}));
  EXPECT_EQ(window.ids(tb), (std::vector<int64_t>{19, 4, 0}));
  EXPECT_EQ(window.widest(), 5);  // emb_a's five distinct ids

  // Reused for the next batch: numbered afresh.
  const std::vector<float> next = {1, 2, 12, 12, 12, 5, 5};
  ASSERT_TRUE(window.Map(next.data(), 1, kExample, 5, &out).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(window.ids(ta), (std::vector<int64_t>{12}));
  EXPECT_EQ(window.ids(tb), (std::vector<int64_t>{5}));
  EXPECT_EQ(window.widest(), 1);
}

// mask_zero: id 0 of a masked table is padding, numbered as any id and
// written as -(its number + 1); the unmasked table beside it numbers its 0
// as any id. Two tables over the same ids must agree on mask_zero (one
// numbering).
TEST(RowWindowTest, AMaskedTablesPaddingIsNegative) {
  const std::string masked = absl::StrReplaceAll(
      kTwoTables, {{R"("name": "emb_a", "input_dim": 50,)",
                    R"("name": "emb_a", "mask_zero": true, "input_dim": 50,)"},
                   {R"("name": "flat_a", "class_name": "Flatten", "config": {"name": "flat_a"})",
                    R"("name": "flat_a", "class_name": "GlobalAveragePooling1D",
                       "config": {"name": "flat_a"})"}});
  const ModelSpec spec = Parse(masked);
  std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 2u);
  const bool a_first = tables[0].variable == "emb_a/embeddings";
  const int ta = a_first ? 0 : 1, tb = a_first ? 1 : 0;
  EXPECT_TRUE(tables[ta].mask_zero);
  EXPECT_FALSE(tables[tb].mask_zero);
  const ModelSpec windowed = WithSparseTables(spec, 5, &tables);
  for (const LayerSpec& l : windowed.layers) {
    if (l.name == "emb_a") EXPECT_EQ(l.padding_id, -1);
    if (l.name == "emb_b") EXPECT_EQ(l.padding_id, 0);
  }
  RowWindow window(tables);
  const std::vector<float> examples = {0.5f, 1.0f, 7, 0, 0, 0, 4,   //
                                       0.5f, 1.0f, 0, 0, 0, 4, 0};  //
  std::vector<float> out;
  ASSERT_TRUE(window.Map(examples.data(), 2, kExample, 5, &out).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1.0f, 0, -2, -2, 0, 1,  //
                                     0.5f, 1.0f, -2, -2, -2, 1, 0}));
  EXPECT_EQ(window.ids(ta), (std::vector<int64_t>{7, 0}));
  EXPECT_EQ(window.ids(tb), (std::vector<int64_t>{0, 4}));

  // The DeepFM's two tables over one input, one masked: refused.
  const std::string shared = absl::StrReplaceAll(
      kTwoTables, {
                      {R"([[["ids_b", 0, 0, {}]]])", R"([[["ids_a", 0, 0, {}]]])"},
                      {R"("name": "emb_a", "input_dim": 50,)",
                       R"("name": "emb_a", "mask_zero": true, "input_dim": 50,)"},
                      {R"("name": "flat_a", "class_name": "Flatten", "config": {"name": "flat_a"})",
                       R"("name": "flat_a", "class_name": "GlobalAveragePooling1D",
                       "config": {"name": "flat_a"})"},
                  });
  absl::StatusOr<ModelSpec> both = ParseKerasModel(shared, "shared.json");
  ASSERT_TRUE(both.ok()) << both.status();
  absl::StatusOr<std::vector<SparseTableInfo>> refused = FindSparseTables(*both);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("read the same ids but only one has mask_zero"),
            std::string::npos)
      << refused.status();
}

TEST(RowWindowTest, RefusesBadIdsNamingTheExample) {
  const ModelSpec spec = Parse(kTwoTables);
  RowWindow window(Tables(spec));
  struct Case {
    const char* what;
    int64_t index;  // in the second example
    float id;
  } cases[] = {
      {"id = input_dim", 2, 50.0f},
      {"id above input_dim", 3, 1000.0f},
      {"negative id", 4, -1.0f},
      {"NaN", 5, std::numeric_limits<float>::quiet_NaN()},
      {"id = emb_b's input_dim", 6, 20.0f},
  };
  for (const Case& c : cases) {
    std::vector<float> examples = {0, 0, 1, 2, 3, 4, 5,  //
                                   0, 0, 1, 2, 3, 4, 5};
    examples[kExample + c.index] = c.id;
    std::vector<float> out;
    absl::Status s = window.Map(examples.data(), 2, kExample, 8, &out);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find("example 1"), std::string::npos) << c.what << ": " << s;
  }
}

TEST(RowWindowTest, ReadsInt64IdsWhereGivenAndFloatsElsewhere) {
  const ModelSpec spec = Parse(kTwoTables);
  std::vector<SparseTableInfo> tables = Tables(spec);
  MakeUnbounded(&tables);
  const bool a_first = tables[0].variable == "emb_a/embeddings";
  const int ta = a_first ? 0 : 1, tb = a_first ? 1 : 0;
  RowWindow window(tables);
  // ids_a (values 2..4) come as int64s, beyond float32's 2^24; their floats
  // are 0 and not read. ids_b (values 5, 6) are floats.
  const int64_t big = (int64_t{1} << 62) + 3;
  const std::vector<int64_t> ids = {big, 7, big,  //
                                    (int64_t{1} << 24) + 1, 7, 0};
  const std::vector<float> examples = {0.5f, 1, 0, 0, 0, 19, 4,  //
                                       2.5f, 3, 0, 0, 0, 4, 1000};
  std::vector<float> out;
  absl::Status s = window.Map(examples.data(), ExampleIds{ids.data(), 2, 3}, 2, kExample, 8, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 0, 1, 0, 0, 1,  //
                                     2.5f, 3, 2, 1, 3, 1, 2}));
  EXPECT_EQ(window.ids(ta), (std::vector<int64_t>{big, 7, (int64_t{1} << 24) + 1, 0}));
  // emb_b is unbounded too: 1000 is beyond its model input_dim of 20.
  EXPECT_EQ(window.ids(tb), (std::vector<int64_t>{19, 4, 1000}));

  // A negative int64 id is refused, naming it and its example.
  std::vector<int64_t> negative = ids;
  negative[4] = -5;
  s = window.Map(examples.data(), ExampleIds{negative.data(), 2, 3}, 2, kExample, 8, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int64 id -5 (value 3 of example 1"), std::string::npos) << s;
}

TEST(RowWindowTest, ABoundedTableRefusesALargeInt64IdPointingAtUnbounded) {
  const ModelSpec spec = Parse(kTwoTables);
  RowWindow window(Tables(spec));  // emb_a: input_dim 50
  const std::vector<int64_t> ids = {1, 2, int64_t{1} << 40};
  const std::vector<float> examples = {0, 0, 0, 0, 0, 1, 2};
  std::vector<float> out;
  absl::Status s = window.Map(examples.data(), ExampleIds{ids.data(), 2, 3}, 1, kExample, 8, &out);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int64 id 1099511627776 (value 4 of example 0"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("[0, input_dim = 50)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--embedding_unbounded"), std::string::npos) << s;
  // The same id is fine below input_dim.
  const std::vector<int64_t> small = {1, 2, 49};
  EXPECT_TRUE(window.Map(examples.data(), ExampleIds{small.data(), 2, 3}, 1, kExample, 8, &out)
                  .ok());
}

TEST(CheckIdsReadTest, EveryInt64IdMustBeReadByATable) {
  const std::vector<SparseTableInfo> tables = Tables(Parse(kTwoTables));
  EXPECT_TRUE(CheckIdsRead(tables, 2, 5).ok());  // ids_a and ids_b
  EXPECT_TRUE(CheckIdsRead(tables, 5, 2).ok());
  EXPECT_TRUE(CheckIdsRead(tables, 0, 0).ok());  // no int64 ids
  absl::Status s = CheckIdsRead(tables, 1, 3);   // value 1 is a dense feature
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("value 1 of an example"), std::string::npos) << s;
  EXPECT_FALSE(CheckIdsRead({}, 2, 5).ok());  // tables sent whole: none sparse
}

TEST(WithSparseTablesTest, AnUnboundedTableStaysUnboundedThroughItsWindow) {
  const ModelSpec spec = Parse(kTwoTables);
  std::vector<SparseTableInfo> tables = Tables(spec);
  MakeUnbounded(&tables);
  const ModelSpec out = WithSparseTables(spec, 6, &tables);
  EXPECT_EQ(Variable(out, "emb_a/embeddings")->table_rows, kUnboundedTable);
  EXPECT_EQ(Variable(out, "emb_b/embeddings")->table_rows, kUnboundedTable);
  // Found again in the windowed spec (as a worker's evaluator does): still
  // unbounded, and still not placed.
  const std::vector<SparseTableInfo> again = Tables(out);
  ASSERT_EQ(again.size(), 2u);
  for (const SparseTableInfo& t : again) EXPECT_EQ(t.input_dim, 0) << t.variable;
  const Placement p = PlaceVariables(out, 2);
  for (const Shard& shard : p.shards) {
    EXPECT_EQ(shard.variable.find("emb_"), std::string::npos) << shard.variable;
  }
}

TEST(RowWindowTest, RefusesMoreDistinctIdsThanTheWindow) {
  const ModelSpec spec = Parse(kTwoTables);
  RowWindow window(Tables(spec));
  // ids_a: 1, 2, 3, 4 (4 distinct); ids_b: 5, 5.
  const std::vector<float> examples = {0, 0, 1, 2, 3, 5, 5,  //
                                       0, 0, 4, 1, 2, 5, 5};
  std::vector<float> out;
  EXPECT_TRUE(window.Map(examples.data(), 2, kExample, 4, &out).ok());
  absl::Status s = window.Map(examples.data(), 2, kExample, 3, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than 3 distinct ids"), std::string::npos) << s;
  EXPECT_NE(s.message().find("emb_a/embeddings"), std::string::npos) << s;
}

// A Functional model over ids_a [3] and ids_b [2] whose Embedding layers
// read `uses` (per layer: its name, rows, width and the inputs it is
// applied to), each use flattened, all concatenated into one sigmoid Dense:
// a DeepFM's first-order and factor tables over the same ids, or tables
// whose inputs only overlap.
std::string TablesOver(
    const std::vector<std::tuple<std::string, int, int, std::vector<std::string>>>& uses) {
  std::string layers = R"(
    {"name": "ids_a", "class_name": "InputLayer",
     "config": {"batch_input_shape": [null, 3], "dtype": "float32", "name": "ids_a"},
     "inbound_nodes": []},
    {"name": "ids_b", "class_name": "InputLayer",
     "config": {"batch_input_shape": [null, 2], "dtype": "float32", "name": "ids_b"},
     "inbound_nodes": []},)";
  std::string flats, nodes;
  for (const auto& [name, rows, width, inputs] : uses) {
    std::string inbound;
    for (const std::string& input : inputs) {
      absl::StrAppend(&inbound, inbound.empty() ? "" : ", ", R"([[")", input, R"(", 0, 0, {}]])");
    }
    absl::StrAppend(&layers, R"(
    {"name": ")", name, R"(", "class_name": "Embedding",
     "config": {"name": ")", name, R"(", "input_dim": )", rows, R"(, "output_dim": )", width,
                    R"(}, "inbound_nodes": [)", inbound, "]},");
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string flat = absl::StrCat("flat_", name, "_", k);
      absl::StrAppend(&layers, R"(
    {"name": ")", flat, R"(", "class_name": "Flatten", "config": {"name": ")", flat,
                      R"("}, "inbound_nodes": [[[")", name, R"(", )", k, ", 0, {}]]]},");
      absl::StrAppend(&nodes, nodes.empty() ? "" : ", ", R"([")", flat, R"(", 0, 0, {}])");
    }
  }
  return absl::StrCat(R"({"class_name": "Functional", "config": {"name": "shared", "layers": [)",
                      layers, R"(
    {"name": "features", "class_name": "Concatenate", "config": {"name": "features", "axis": -1},
     "inbound_nodes": [[)", nodes, R"(]]},
    {"name": "click", "class_name": "Dense",
     "config": {"name": "click", "units": 1, "activation": "sigmoid"},
     "inbound_nodes": [[["features", 0, 0, {}]]]}],
  "input_layers": [["ids_a", 0, 0], ["ids_b", 0, 0]],
  "output_layers": [["click", 0, 0]]}})");
}

TEST(RowWindowTest, TablesReadingTheSameIdsShareOneNumbering) {
  // linear (50 x 1) and factors (40 x 3) both read ids_a; other reads ids_b.
  const ModelSpec spec = Parse(TablesOver({{"linear", 50, 1, {"ids_a"}},
                                           {"factors", 40, 3, {"ids_a"}},
                                           {"other", 9, 2, {"ids_b"}}}));
  std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 3u);
  int linear = -1, factors = -1, other = -1;
  for (const SparseTableInfo& t : tables) {
    (t.variable == "linear/embeddings" ? linear
     : t.variable == "factors/embeddings" ? factors
                                          : other) = t.table;
  }
  ASSERT_TRUE(linear >= 0 && factors >= 0 && other >= 0);
  RowWindow window(tables);
  constexpr int64_t kIds = 5;
  const std::vector<float> examples = {7, 3, 7, 8, 1,  //
                                       39, 0, 3, 1, 1};
  std::vector<float> out;
  absl::Status s = window.Map(examples.data(), 2, kIds, 4, &out);
  ASSERT_TRUE(s.ok()) << s;
  // ids_a renumbered once (7, 3, 39, 0 -> 0..3), for both of its tables.
  EXPECT_EQ(out, (std::vector<float>{0, 1, 0, 0, 1,  //
                                     2, 3, 1, 1, 1}));
  EXPECT_EQ(window.ids(linear), (std::vector<int64_t>{7, 3, 39, 0}));
  EXPECT_EQ(window.ids(factors), window.ids(linear));
  EXPECT_EQ(window.ids(other), (std::vector<int64_t>{8, 1}));

  // An id that fits linear's 50 rows but not factors' 40 is refused, naming
  // factors.
  const std::vector<float> bad = {45, 3, 7, 8, 1};
  s = window.Map(bad.data(), 1, kIds, 4, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 45"), std::string::npos) << s;
  EXPECT_NE(s.message().find("factors/embeddings"), std::string::npos) << s;
}

TEST(FindSparseTablesTest, TablesReadingOverlappingButDifferentIdsAreRefused) {
  // both reads ids_a and ids_b; some reads ids_a only: one numbering of
  // ids_a cannot serve both.
  const ModelSpec spec = Parse(
      TablesOver({{"both", 50, 2, {"ids_a", "ids_b"}}, {"some", 50, 2, {"ids_a"}}}));
  absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(spec);
  ASSERT_FALSE(tables.ok());
  EXPECT_EQ(tables.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tables.status().message().find("both/embeddings"), std::string::npos)
      << tables.status();
  EXPECT_NE(tables.status().message().find("some/embeddings"), std::string::npos)
      << tables.status();
  EXPECT_NE(tables.status().message().find("overlapping"), std::string::npos) << tables.status();
}

TEST(RowOwnerTest, InRangeAndEven) {
  for (int num_ps : {1, 2, 3, 7}) {
    for (int table : {0, 1, 5}) {
      for (int64_t id : {int64_t{0}, int64_t{1}, int64_t{12345}, int64_t{1} << 40}) {
        const int ps = RowOwner(table, id, num_ps);
        EXPECT_GE(ps, 0);
        EXPECT_LT(ps, num_ps);
        EXPECT_EQ(ps, RowOwner(table, id, num_ps)) << "pure";
      }
    }
  }
  EXPECT_EQ(RowOwner(0, 17, 0), 0);
  for (int table : {0, 1}) {
    int counts[3] = {0, 0, 0};
    constexpr int kIds = 100000;
    for (int64_t id = 0; id < kIds; ++id) ++counts[RowOwner(table, id, 3)];
    for (int ps = 0; ps < 3; ++ps) {
      EXPECT_NEAR(counts[ps], kIds / 3.0, 0.02 * kIds / 3.0) << "table " << table << " ps " << ps;
    }
  }
}

TEST(InitialParametersTest, EachTableRowIsItsInitialRow) {
  const ModelSpec spec = Parse(kTwoTables);
  const std::vector<SparseTableInfo> tables = Tables(spec);
  ASSERT_EQ(tables.size(), 2u);
  for (uint64_t seed : {uint64_t{1}, uint64_t{77}}) {
    const std::vector<float> params = InitialParameters(spec, seed);
    ASSERT_EQ(static_cast<int64_t>(params.size()), spec.num_parameters);
    for (const SparseTableInfo& t : tables) {
      const VariableSpec* v = Variable(spec, t.variable);
      ASSERT_NE(v, nullptr);
      std::vector<float> row(t.width);
      bool varied = false;
      for (int64_t id = 0; id < t.input_dim; ++id) {
        InitialRow(v->initializer, v->fan_in, v->fan_out, seed, t.table, id, t.width,
                   row.data());
        const float* got = params.data() + v->offset + id * t.width;
        for (int j = 0; j < t.width; ++j) {
          ASSERT_EQ(got[j], row[j]) << t.variable << " seed " << seed << " id " << id << " " << j;
          varied |= got[j] != params[v->offset];
        }
      }
      EXPECT_TRUE(varied) << t.variable << ": random rows";
    }
  }
}

}  // namespace
}  // namespace pscluster
