// Synthetic Criteo-format click logs drawn from a planted model, so that the
// best AUC any model can reach is known: the planted model's own AUC on the
// drawn labels. docs/criteo.md gives the model's formula, the feature
// distributions and planted.json.
//
// Deterministic: the same options give the same examples and the same
// bytes (the draws use std::mt19937_64, whose output the C++ standard
// fixes, and this file's own transforms; only libm's exp/log/pow could
// differ in the last bit on another C library). Everything here is a value
// or owns what it holds; a CriteoSynthesizer is used by one thread at a
// time, PlantedCtrModel is thread-safe.
#ifndef PSCLUSTER_MODEL_CRITEO_SYNTH_H_
#define PSCLUSTER_MODEL_CRITEO_SYNTH_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/criteo.h"
#include "model/criteo_dataset.h"

namespace pscluster {

// The generator's flags (deploy/data/criteo_synth).
struct CriteoSynthOptions {
  int64_t rows = 1000000;            // train + test
  int64_t ids_per_feature = 100000;  // distinct ids each of C1..C26 draws from
  uint64_t seed = 1;
  double test_fraction = 0.1;  // of rows, rounded, written to test.txt
  double zipf = 1.05;          // id of frequency rank r (from 1) drawn with weight r^-zipf
  // criteo.json's: the models' Embedding rows; kCriteoInt64Ids (0): int64 ids
  int64_t buckets = kCriteoDefaultBuckets;
  // When > 0, only the ids of the signal_ranks most frequent ranks of each
  // feature carry planted weights (w, v); rarer ids are drawn as usual but
  // weigh nothing. 0: every id carries weights.
  int64_t signal_ranks = 0;
  // Two tasks: a second label column, the conversion, 1 with the planted
  // probability of a conversion after a click (ConversionProbability),
  // only where the click is 1; criteo.json then says "labels": 2. Off, the
  // files are the same bytes as without the option.
  bool conversions = false;
  // Behaviour sequences: each example gets a history of 1 to this many
  // items (C1's ids, oldest first; kCriteoMaxHistory at most), drawn
  // around a topic the user prefers, and the click's logit gains the
  // interest term (PlantedCtrModel::Interest); criteo.json then says
  // "history": N. 0: none, the files the same bytes as without it.
  int history = 0;
};

// InvalidArgument naming the flag and its value ("--rows=1: ...") unless
// rows >= 2, test_fraction leaves both splits at least one row,
// ids_per_feature is in [1, kMaxSynthIds], zipf in [0, 10] and buckets in
// [1, kCriteoMaxBuckets] or kCriteoInt64Ids, signal_ranks in [0, ids_per_feature],
// and history in [0, kCriteoMaxHistory] (with buckets, not int64 ids).
absl::Status CheckCriteoSynthOptions(const CriteoSynthOptions& options);

// At most 2^27 ids a feature: (feature, rank) then fits the 32 bits of a
// Criteo hash.
inline constexpr int64_t kMaxSynthIds = int64_t{1} << 27;

// The id (as CriteoExample holds it: hash + 1) the generator writes for the
// id of frequency rank `rank` (0 the most frequent) of categorical feature
// `feature`: a fixed 32-bit bijection of feature * 2^27 + rank, so that
// every (feature, rank) has its own 8 hex digits, looking random.
int64_t SynthIdOfRank(int feature, int64_t rank);

// The inverse: the rank of a generator-written id of `feature`; -1 for an
// id no rank of this feature is written as (missing, another feature's).
int64_t SynthRankOfId(int feature, int64_t id);

// The planted model (docs/criteo.md): a factorization machine (Rendle
// 2010), the family a DeepFM holds, over the fields' ids and the integers'
// dense inputs:
//   logit = bias + sum over present C_f of w_f(id)
//         + sum over the pairs f < g of present C_f, C_g of
//           <v_f(id_f), v_g(id_g)>                      (k = 4 dimensions)
//         + sum over j of u_j * (x_j - c_j)
// x_j is I_j's dense input as the reader makes it (CriteoIntegerTransform
// of the value; 0 for an empty field). w and v are functions of (seed,
// CriteoFeatureKey(f, id)), uniform with fixed standard deviations; u_j is
// fixed per seed, c_j the mean of x_j under the generator's distribution
// of I_j. With signal_ranks > 0,
// w and v are 0 for an id that is not one of the signal_ranks most
// frequent of its feature (SynthRankOfId; an id the generator never writes
// for that feature included). It reads any CriteoExample, so a test
// recomputes the probabilities from the files.
class PlantedCtrModel {
 public:
  explicit PlantedCtrModel(uint64_t seed, int64_t signal_ranks = 0);

  double Logit(const CriteoExample& example) const;
  double Probability(const CriteoExample& example) const;  // sigmoid(Logit)

  // The history's part of Logit (0 without a history or an item):
  //   kSynthInterestWeight * (share - 1 / kSynthTopics)
  // where share is the fraction of the history's items whose topic is the
  // item's (C1's). An item's topic is a function of (seed, its id): the
  // model must learn which items go together, as DIN's attention of the
  // item over the history can.
  double Interest(const CriteoExample& example) const;
  // The topic, in [0, kSynthTopics), of item `id` (C1's ids).
  int Topic(int64_t id) const;

  // The second task (CriteoSynthOptions::conversions): the logit of a
  // conversion given a click, sharing the click model's factors,
  //   conversion_bias + sum over present C_f of w'_f(id)
  //   + sum over the pairs f < g of <v_f(id_f), v_g(id_g)>
  // with w' of its own (the same distribution as w) and v the click
  // model's; and its probability, sigmoid of it.
  double ConversionLogit(const CriteoExample& example) const;
  double ConversionProbability(const CriteoExample& example) const;
  double conversion_bias() const;

  double bias() const { return bias_; }
  const std::vector<double>& integer_weights() const { return integer_weights_; }
  const std::vector<double>& integer_centers() const { return integer_centers_; }

 private:
  // Whether feature f's id carries planted weights.
  bool HasSignal(int f, int64_t id) const;
  // The logit's parts: the first-order weights' sum (the conversion's own
  // with `conversion`), the pairs' and the integers'.
  void Parts(const CriteoExample& example, bool conversion, double* wide, double* pairs,
             double* integers) const;

  uint64_t seed_mix_;  // mixed into every per-id hash
  int64_t signal_ranks_;
  double bias_;
  std::vector<double> integer_weights_;  // u_j, kCriteoIntegerFeatures of them
  std::vector<double> integer_centers_;  // c_j
};

inline constexpr int kSynthFmDim = 4;
// The history's planted model: the items' topics, the interest term's
// weight, and the share of a history drawn from the user's topic.
inline constexpr int kSynthTopics = 8;
inline constexpr double kSynthInterestWeight = 2.5;
inline constexpr double kSynthHistoryFocus = 0.7;

// Draws examples: ids by a power law over ids_per_feature ranks, integers
// from heavy-tailed (Lomax) distributions, fields missing at fixed per-
// feature rates, the label ~ Bernoulli(planted probability).
class CriteoSynthesizer {
 public:
  // `options` must pass CheckCriteoSynthOptions.
  explicit CriteoSynthesizer(const CriteoSynthOptions& options);

  // The next example and its planted probability of a click (with
  // conversions, *conversion gets the probability of a click and a
  // conversion, the second label's).
  void Next(CriteoExample* example, double* probability, double* conversion = nullptr);

  const PlantedCtrModel& model() const { return model_; }

 private:
  // Draws a rank with weight (rank + 1)^-zipf: Vose's alias table, one
  // 64-bit draw (high half: the column, low half: the coin).
  int64_t DrawRank();
  // example->history: a length uniform in [1, history_], a topic the user
  // prefers, each item of it with probability kSynthHistoryFocus (ranks
  // redrawn until one of that topic, at most 64 draws), else any item.
  void DrawHistory(CriteoExample* example);
  double Uniform();  // in [0, 1), 53 bits

  PlantedCtrModel model_;
  bool conversions_;
  int history_;
  std::mt19937_64 rng_;
  std::vector<uint32_t> alias_threshold_;  // keep the column below it (of 2^32)
  std::vector<uint32_t> alias_;
};

// What WriteCriteoSynth wrote and the planted model's scores on it.
struct CriteoSynthSummary {
  int64_t train_rows = 0;
  int64_t test_rows = 0;
  double train_positive_rate = 0;
  double test_positive_rate = 0;
  double train_log_loss = 0;  // the planted probabilities' mean log loss
  double test_log_loss = 0;
  // RocAuc (model/roc_auc.h) of the planted probabilities (as floats) on
  // the test split's labels: what the best model scores in expectation.
  double test_auc = 0;
  // With conversions: the second label's positive rates, and the AUC of
  // the planted probabilities of a click and a conversion on it.
  double train_conversion_rate = 0;
  double test_conversion_rate = 0;
  double test_conversion_auc = 0;
  // With a history: the AUC on the test split of the planted probabilities
  // without the interest term (what a model blind to the history could
  // reach at best), beside test_auc.
  double test_auc_without_history = 0;
  double seconds = 0;  // of drawing and writing
};

// Draws options.rows examples into <out_dir>/train.txt (the first rows)
// and <out_dir>/test.txt (the last round(rows * test_fraction)), then
// writes <out_dir>/planted.json (CriteoSynthJson) and <out_dir>/criteo.json
// (CriteoConfigJson(options.buckets)), which makes the folder a dataset
// (model/criteo_dataset.h). Creates out_dir (not
// its parents) when missing. `progress`, when given, is called after every
// `progress_every` (> 0) rows with the rows written so far. Errors name the
// file; files already written are left.
absl::StatusOr<CriteoSynthSummary> WriteCriteoSynth(
    const CriteoSynthOptions& options, const std::string& out_dir,
    const std::function<void(int64_t rows)>& progress = nullptr, int64_t progress_every = 1000000);

// planted.json: the options, the splits' rows, positive rates and log
// losses, the planted test AUC, and the model's constants.
std::string CriteoSynthJson(const CriteoSynthOptions& options, const CriteoSynthSummary& summary);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CRITEO_SYNTH_H_
