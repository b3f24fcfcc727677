#include "model/criteo_synth.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "model/roc_auc.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

// The planted model's scales (docs/criteo.md), chosen so that with the
// default flags about a quarter of the examples are clicks and the planted
// AUC is about 0.77, as in real CTR logs.
constexpr double kBias = -1.4;
constexpr double kWideStd = 0.20;        // of each w_f(id)
constexpr double kFmStd = 0.13;          // of each component of v_f(id)
constexpr double kIntegerWeight = 0.15;  // u_j uniform in [-this, this]
// The conversion after a click: its bias, and the salt of its own
// first-order weights' hashes.
constexpr double kConversionBias = -1.0;
constexpr uint64_t kConversionSalt = 0x5bd1e9955bd1e995ULL;
// The salt of the items' topics' hashes.
constexpr uint64_t kTopicSalt = 0x2545f4914f6cdd1dULL;

// Per-feature rates of empty fields, about those of the real logs.
constexpr double kIntegerMissing[kCriteoIntegerFeatures] = {
    0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.001, 0.04, 0.45, 0.04, 0.76, 0.22};
constexpr double kCategoryMissing[kCriteoCategoricalFeatures] = {
    0, 0, 0.03, 0.03, 0, 0.12, 0,    0,    0,    0.03, 0,    0.03, 0,
    0, 0, 0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0,    0.03, 0.44, 0.44};
// Integers are floor(scale * (U^(-1/alpha) - 1)) (Lomax: heavy-tailed, the
// smaller alpha the heavier), capped at kMaxInteger; I2 is -1 at
// kNegativeRate, as real logs have small negative values there.
constexpr double kIntegerScale[kCriteoIntegerFeatures] = {2,  20, 10, 5, 5000, 50, 5,
                                                          10, 50, 1,  2, 1,    5};
constexpr double kIntegerAlpha[kCriteoIntegerFeatures] = {1.5, 1.2, 1.3, 2.0, 1.1, 1.2, 1.5,
                                                          2.5, 1.5, 3.0, 2.0, 1.5, 1.8};
constexpr double kMaxInteger = 1e9;
constexpr int kNegativeFeature = 1;
constexpr double kNegativeRate = 0.05;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr double kSqrt3 = 1.7320508075688772;

// The splitmix64 finalizer, a bijection (as CriteoFeatureKey uses).
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A hash's top 53 bits as a uniform value in [-1, 1) (standard deviation
// 1/sqrt(3)).
double Symmetric(uint64_t h) { return double(h >> 11) * 0x1.0p-52 - 1.0; }

// The 32-bit bijection behind SynthIdOfRank and its inverse: xor-shifts
// (each its own inverse) around multiplications by odd constants.
constexpr uint32_t kMul1 = 0x7feb352d;
constexpr uint32_t kMul2 = 0x846ca68b;
constexpr uint32_t InverseOdd(uint32_t a) {
  uint32_t y = a;  // right to 3 bits; each Newton step doubles them
  for (int i = 0; i < 5; ++i) y *= 2 - a * y;
  return y;
}
static_assert(kMul1 * InverseOdd(kMul1) == 1 && kMul2 * InverseOdd(kMul2) == 1);

uint32_t Scramble(uint32_t x) {
  x ^= x >> 16;
  x *= kMul1;
  x ^= x >> 16;
  x *= kMul2;
  return x ^ (x >> 16);
}

uint32_t Unscramble(uint32_t x) {
  x ^= x >> 16;
  x *= InverseOdd(kMul2);
  x ^= x >> 16;
  x *= InverseOdd(kMul1);
  return x ^ (x >> 16);
}

// A file written through a large buffer; errors name the file.
class BufferedFile {
 public:
  static constexpr size_t kFlushAt = size_t{4} << 20;

  explicit BufferedFile(std::string path) : path_(std::move(path)) {}
  ~BufferedFile() {
    if (file_ != nullptr) std::fclose(file_);
  }

  absl::Status Open() {
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) return ErrnoStatus(errno, "cannot create " + path_);
    buffer_.reserve(kFlushAt + 4096);
    return absl::OkStatus();
  }
  std::string* buffer() { return &buffer_; }
  absl::Status MaybeFlush() { return buffer_.size() >= kFlushAt ? Flush() : absl::OkStatus(); }
  absl::Status Close() {
    if (absl::Status s = Flush(); !s.ok()) return s;
    const int closed = std::fclose(file_);
    file_ = nullptr;
    return closed == 0 ? absl::OkStatus() : ErrnoStatus(errno, "cannot write " + path_);
  }

 private:
  absl::Status Flush() {
    if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
      return ErrnoStatus(errno, "cannot write " + path_);
    }
    buffer_.clear();
    return absl::OkStatus();
  }

  const std::string path_;
  std::FILE* file_ = nullptr;
  std::string buffer_;
};

// I(j+1)'s value for a uniform draw u in [0, 1).
int64_t DrawInteger(int j, double u) {
  const double lomax = kIntegerScale[j] * (std::pow(1 - u, -1 / kIntegerAlpha[j]) - 1);
  return static_cast<int64_t>(std::min(lomax, kMaxInteger));
}

// The mean of I(j+1)'s dense input as the reader makes it (an empty field
// and a negative value: 0; else CriteoIntegerTransform), by the midpoint
// rule over u for the present, non-negative values: the planted model
// centres the integer terms on it, so that the seed's weights u_j do not
// move the positive rate.
double MeanIntegerTransform(int j) {
  constexpr int kPoints = 4096;
  double sum = 0;
  for (int i = 0; i < kPoints; ++i)
    sum += CriteoIntegerTransform(DrawInteger(j, (i + 0.5) / kPoints));
  const double negative = j == kNegativeFeature ? kNegativeRate : 0;
  return (1 - kIntegerMissing[j]) * (1 - negative) * sum / kPoints;
}

int64_t TestRows(const CriteoSynthOptions& options) {
  return std::llround(double(options.rows) * options.test_fraction);
}

}  // namespace

absl::Status CheckCriteoSynthOptions(const CriteoSynthOptions& o) {
  if (o.rows < 2) return absl::InvalidArgumentError(absl::StrCat("--rows=", o.rows, ": need >= 2"));
  if (!(o.test_fraction > 0 && o.test_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--test_fraction=", o.test_fraction, ": must be in (0, 1)"));
  }
  const int64_t test_rows = TestRows(o);
  if (test_rows < 1 || test_rows >= o.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--test_fraction=", o.test_fraction, ": leaves ", test_rows, " of --rows=", o.rows,
        " for the test split; both splits need at least one row"));
  }
  if (o.ids_per_feature < 1 || o.ids_per_feature > kMaxSynthIds) {
    return absl::InvalidArgumentError(absl::StrCat("--ids_per_feature=", o.ids_per_feature,
                                                   ": must be in [1, ", kMaxSynthIds, "]"));
  }
  if (!(o.zipf >= 0 && o.zipf <= 10)) {
    return absl::InvalidArgumentError(absl::StrCat("--zipf=", o.zipf, ": must be in [0, 10]"));
  }
  if (o.signal_ranks < 0 || o.signal_ranks > o.ids_per_feature) {
    return absl::InvalidArgumentError(absl::StrCat("--signal_ranks=", o.signal_ranks,
                                                   ": must be in [0, --ids_per_feature=",
                                                   o.ids_per_feature, "]"));
  }
  if (o.history < 0 || o.history > kCriteoMaxHistory) {
    return absl::InvalidArgumentError(
        absl::StrCat("--history=", o.history, ": must be in [0, ", kCriteoMaxHistory, "]"));
  }
  if (o.history > 0 && o.buckets == kCriteoInt64Ids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--history=", o.history, ": needs --buckets (the items' rows), not --buckets=0"));
  }
  if (o.buckets < 0 || o.buckets > kCriteoMaxBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("--buckets=", o.buckets, ": must be in [1, ", kCriteoMaxBuckets,
                     "] (2^24: rows are exact in float32), or 0 for int64 ids"));
  }
  return absl::OkStatus();
}

int64_t SynthIdOfRank(int feature, int64_t rank) {
  return int64_t{Scramble(static_cast<uint32_t>(feature * kMaxSynthIds + rank))} + 1;
}

int64_t SynthRankOfId(int feature, int64_t id) {
  if (id < 1 || id > (int64_t{1} << 32)) return -1;
  const int64_t x = Unscramble(static_cast<uint32_t>(id - 1));
  return x / kMaxSynthIds == feature ? x % kMaxSynthIds : -1;
}

PlantedCtrModel::PlantedCtrModel(uint64_t seed, int64_t signal_ranks)
    : seed_mix_(Mix64(seed + kGolden)), signal_ranks_(signal_ranks), bias_(kBias) {
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    integer_weights_.push_back(kIntegerWeight * Symmetric(Mix64(seed_mix_ + (j + 1) * kGolden)));
    integer_centers_.push_back(MeanIntegerTransform(j));
  }
}

bool PlantedCtrModel::HasSignal(int f, int64_t id) const {
  if (id == kCriteoMissingId) return false;
  if (signal_ranks_ == 0) return true;
  const int64_t rank = SynthRankOfId(f, id);
  return rank >= 0 && rank < signal_ranks_;
}

void PlantedCtrModel::Parts(const CriteoExample& example, bool conversion, double* wide,
                            double* pairs, double* integers) const {
  *wide = *pairs = *integers = 0;
  uint64_t hashes[kCriteoCategoricalFeatures] = {};
  bool signal[kCriteoCategoricalFeatures] = {};
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    const int64_t id = example.categories[f];
    if (!(signal[f] = HasSignal(f, id))) continue;
    hashes[f] = Mix64(CriteoFeatureKey(f, id) ^ seed_mix_);
    const uint64_t w = conversion ? Mix64(hashes[f] ^ kConversionSalt) : hashes[f];
    *wide += kWideStd * kSqrt3 * Symmetric(w);
  }
  // sum over f < g of <v_f, v_g> = 1/2 sum_d ((sum_f v_fd)^2 - sum_f v_fd^2)
  for (int d = 1; d <= kSynthFmDim; ++d) {
    double sum = 0, squares = 0;
    for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
      if (!signal[f]) continue;
      const double v = kFmStd * kSqrt3 * Symmetric(Mix64(hashes[f] + d * kGolden));
      sum += v;
      squares += v * v;
    }
    *pairs += 0.5 * (sum * sum - squares);
  }
  // Linear in the models' dense inputs, an empty field's 0 included (the
  // reader gives a model no other sign of it).
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    const double x = example.has_integer(j) ? CriteoIntegerTransform(example.integers[j]) : 0;
    *integers += integer_weights_[j] * (x - integer_centers_[j]);
  }
}

int PlantedCtrModel::Topic(int64_t id) const {
  return static_cast<int>(Mix64(CriteoFeatureKey(kCriteoItemFeature, id) ^ seed_mix_ ^ kTopicSalt) %
                          kSynthTopics);
}

double PlantedCtrModel::Interest(const CriteoExample& example) const {
  const int64_t item = example.categories[kCriteoItemFeature];
  if (example.history_length == 0 || item == kCriteoMissingId) return 0;
  const int topic = Topic(item);
  int same = 0;
  for (int k = 0; k < example.history_length; ++k) same += Topic(example.history[k]) == topic;
  const double share = double(same) / example.history_length;
  return kSynthInterestWeight * (share - 1.0 / kSynthTopics);
}

double PlantedCtrModel::Logit(const CriteoExample& example) const {
  double wide, pairs, integers;
  Parts(example, false, &wide, &pairs, &integers);
  return bias_ + wide + pairs + integers + Interest(example);
}

double PlantedCtrModel::Probability(const CriteoExample& example) const {
  return 1.0 / (1.0 + std::exp(-Logit(example)));
}

double PlantedCtrModel::ConversionLogit(const CriteoExample& example) const {
  double wide, pairs, integers;
  Parts(example, true, &wide, &pairs, &integers);
  return kConversionBias + wide + pairs;
}

double PlantedCtrModel::ConversionProbability(const CriteoExample& example) const {
  return 1.0 / (1.0 + std::exp(-ConversionLogit(example)));
}

double PlantedCtrModel::conversion_bias() const { return kConversionBias; }

CriteoSynthesizer::CriteoSynthesizer(const CriteoSynthOptions& options)
    : model_(options.seed, options.signal_ranks),
      conversions_(options.conversions),
      history_(options.history),
      rng_(options.seed) {
  // Vose's alias method over weights (r + 1)^-zipf scaled to mean 1.
  const size_t n = static_cast<size_t>(options.ids_per_feature);
  std::vector<double> q(n);
  double sum = 0;
  for (size_t r = 0; r < n; ++r) sum += q[r] = std::pow(double(r + 1), -options.zipf);
  for (double& v : q) v *= double(n) / sum;
  alias_threshold_.assign(n, UINT32_MAX);
  alias_.resize(n);
  std::vector<uint32_t> small, large;
  for (size_t r = 0; r < n; ++r) {
    alias_[r] = static_cast<uint32_t>(r);
    (q[r] < 1 ? small : large).push_back(static_cast<uint32_t>(r));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t s = small.back(), l = large.back();
    small.pop_back();
    alias_threshold_[s] = static_cast<uint32_t>(q[s] * 0x1.0p32);
    alias_[s] = l;
    q[l] -= 1 - q[s];
    if (q[l] < 1) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // What is left has weight 1 up to rounding: kept (threshold UINT32_MAX,
  // alias itself).
}

double CriteoSynthesizer::Uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

int64_t CriteoSynthesizer::DrawRank() {
  const uint64_t r = rng_();
  const uint64_t column = ((r >> 32) * alias_.size()) >> 32;
  return static_cast<uint32_t>(r) < alias_threshold_[column] ? column : alias_[column];
}

void CriteoSynthesizer::DrawHistory(CriteoExample* example) {
  example->history_length = 1 + static_cast<int>(rng_() % static_cast<uint64_t>(history_));
  const int topic = static_cast<int>(rng_() % kSynthTopics);
  for (int k = 0; k < example->history_length; ++k) {
    int64_t id = SynthIdOfRank(kCriteoItemFeature, DrawRank());
    if (Uniform() < kSynthHistoryFocus) {
      for (int tries = 1; tries < 64 && model_.Topic(id) != topic; ++tries) {
        id = SynthIdOfRank(kCriteoItemFeature, DrawRank());
      }
    }
    example->history[k] = id;
  }
}

void CriteoSynthesizer::Next(CriteoExample* example, double* probability, double* conversion) {
  *example = CriteoExample();
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    if (kIntegerMissing[j] > 0 && Uniform() < kIntegerMissing[j]) continue;
    example->integer_present |= 1u << j;
    if (j == kNegativeFeature && Uniform() < kNegativeRate) {
      example->integers[j] = -1;
      continue;
    }
    example->integers[j] = DrawInteger(j, Uniform());
  }
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    if (kCategoryMissing[f] > 0 && Uniform() < kCategoryMissing[f]) continue;
    example->categories[f] = SynthIdOfRank(f, DrawRank());
  }
  if (history_ > 0) DrawHistory(example);  // no draw without: the same bytes
  *probability = model_.Probability(*example);
  example->label = Uniform() < *probability ? 1.0f : 0.0f;
  if (!conversions_) return;
  // Drawn for every example, clicked or not, so that a conversion's draw
  // does not hang on the click's.
  const double after_click = model_.ConversionProbability(*example);
  const bool converted = Uniform() < after_click;
  example->label2 = example->label > 0.5f && converted ? 1.0f : 0.0f;
  if (conversion != nullptr) *conversion = *probability * after_click;
}

absl::StatusOr<CriteoSynthSummary> WriteCriteoSynth(
    const CriteoSynthOptions& options, const std::string& out_dir,
    const std::function<void(int64_t rows)>& progress, int64_t progress_every) {
  if (absl::Status s = CheckCriteoSynthOptions(options); !s.ok()) return s;
  if (::mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "cannot create " + out_dir);
  }
  const absl::Time start = absl::Now();
  CriteoSynthSummary summary;
  summary.test_rows = TestRows(options);
  summary.train_rows = options.rows - summary.test_rows;
  CriteoSynthesizer synth(options);
  std::vector<float> test_probabilities, test_labels, test_conversions, test_labels2;
  std::vector<float> test_blind;  // with a history: the probabilities without it
  const int labels = options.conversions ? 2 : 1;
  test_probabilities.reserve(summary.test_rows);
  test_labels.reserve(summary.test_rows);
  int64_t written = 0;
  for (const bool test : {false, true}) {
    BufferedFile file(absl::StrCat(out_dir, test ? "/test.txt" : "/train.txt"));
    if (absl::Status s = file.Open(); !s.ok()) return s;
    const int64_t rows = test ? summary.test_rows : summary.train_rows;
    double positives = 0, loss = 0, conversions = 0;
    CriteoExample example;
    double p = 0, pc = 0;
    for (int64_t i = 0; i < rows; ++i) {
      synth.Next(&example, &p, &pc);
      AppendCriteoLine(example, file.buffer(), labels, options.history);
      conversions += example.label2;
      if (absl::Status s = file.MaybeFlush(); !s.ok()) return s;
      const bool click = example.label > 0.5f;
      positives += click;
      loss -= std::log(std::clamp(click ? p : 1 - p, 1e-15, 1.0));
      if (test) {
        test_probabilities.push_back(static_cast<float>(p));
        test_labels.push_back(example.label);
        if (options.conversions) {
          test_conversions.push_back(static_cast<float>(pc));
          test_labels2.push_back(example.label2);
        }
        if (options.history > 0) {
          const double blind = synth.model().Logit(example) - synth.model().Interest(example);
          test_blind.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-blind))));
        }
      }
      if (++written % progress_every == 0 && progress) progress(written);
    }
    if (absl::Status s = file.Close(); !s.ok()) return s;
    (test ? summary.test_positive_rate : summary.train_positive_rate) = positives / double(rows);
    (test ? summary.test_log_loss : summary.train_log_loss) = loss / double(rows);
    (test ? summary.test_conversion_rate : summary.train_conversion_rate) =
        conversions / double(rows);
  }
  summary.test_auc = RocAuc(test_probabilities, test_labels);
  if (options.conversions) summary.test_conversion_auc = RocAuc(test_conversions, test_labels2);
  if (options.history > 0) summary.test_auc_without_history = RocAuc(test_blind, test_labels);
  summary.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string json = CriteoSynthJson(options, summary);
  if (absl::Status s = WriteFileAtomically(out_dir + "/planted.json", {json}); !s.ok()) return s;
  if (absl::Status s =
          WriteFileAtomically(absl::StrCat(out_dir, "/", kCriteoConfigFile),
                              {CriteoConfigJson(options.buckets, labels, options.history)});
      !s.ok()) {
    return s;
  }
  return summary;
}

std::string CriteoSynthJson(const CriteoSynthOptions& options, const CriteoSynthSummary& s) {
  const PlantedCtrModel model(options.seed, options.signal_ranks);
  const double rows = double(s.train_rows + s.test_rows);
  nlohmann::ordered_json j = {
      {"generator", "deploy/data/criteo_synth"},
      {"flags",
       {{"rows", options.rows},
        {"ids_per_feature", options.ids_per_feature},
        {"seed", options.seed},
        {"test_fraction", options.test_fraction},
        {"zipf", options.zipf},
        {"buckets", options.buckets},
        {"signal_ranks", options.signal_ranks},
        {"conversions", options.conversions},
        {"history", options.history}}},
      {"seed", options.seed},
      {"positive_rate",
       (s.train_positive_rate * s.train_rows + s.test_positive_rate * s.test_rows) / rows},
      {"planted_auc", s.test_auc},
      {"planted_log_loss", s.test_log_loss},
      {"train",
       {{"file", "train.txt"},
        {"rows", s.train_rows},
        {"positive_rate", s.train_positive_rate},
        {"planted_log_loss", s.train_log_loss}}},
      {"test",
       {{"file", "test.txt"},
        {"rows", s.test_rows},
        {"positive_rate", s.test_positive_rate},
        {"planted_log_loss", s.test_log_loss},
        {"planted_auc", s.test_auc}}},
      {"model",
       {{"bias", model.bias()},
        {"wide_std", kWideStd},
        {"fm_dim", kSynthFmDim},
        {"fm_std", kFmStd},
        {"fm_pairs", "all"},
        {"integer_weights", model.integer_weights()},
        {"integer_centers", model.integer_centers()},
        {"integer_transform", "log(1 + max(x, 0))"}}},
  };
  if (options.conversions) {
    j["conversion"] = {{"label", "the second column: a click followed by a conversion"},
                       {"bias", model.conversion_bias()},
                       {"logit", "bias + its own first-order weights + the click model's pairs"},
                       {"train_positive_rate", s.train_conversion_rate},
                       {"test_positive_rate", s.test_conversion_rate},
                       {"planted_auc", s.test_conversion_auc}};
  }
  if (options.history > 0) {
    j["history"] = {
        {"field", "after C26: C1's ids the user acted on before, oldest first, comma-separated"},
        {"most_items", options.history},
        {"length", "uniform in [1, most_items]"},
        {"topics", kSynthTopics},
        {"focus", kSynthHistoryFocus},
        {"interest_weight", kSynthInterestWeight},
        {"logit",
         "+ interest_weight * (the share of the history of the item's topic - 1 / topics)"},
        {"planted_auc_without_history", s.test_auc_without_history}};
  }
  return j.dump(2) + "\n";
}

}  // namespace pscluster
