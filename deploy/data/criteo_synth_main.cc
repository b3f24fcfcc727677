// criteo_synth: writes Criteo-format train.txt and test.txt drawn from a
// planted click model, planted.json with the planted model's own test AUC
// (the best a trained model can expect), and criteo.json (--buckets), which
// makes the folder training data. docs/criteo.md.
//
// Exit codes: 0 done, 1 the files could not be written, 2 bad flags.
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/command_line.h"
#include "common/exit_codes.h"
#include "model/criteo_synth.h"

ABSL_FLAG(int64_t, rows, 1000000, "Examples to write, train and test together");
ABSL_FLAG(int64_t, ids_per_feature, 100000,
          "Distinct ids each categorical feature (C1..C26) draws from");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the planted model and of the draws: same seed, same bytes");
ABSL_FLAG(std::string, out, "", "Folder to write train.txt, test.txt, planted.json to (required)");
ABSL_FLAG(double, test_fraction, 0.1, "Fraction of --rows (rounded) written to test.txt");
ABSL_FLAG(double, zipf, 1.05,
          "Power-law exponent of the ids' frequencies: rank r (from 1) has weight r^-zipf");
ABSL_FLAG(int64_t, signal_ranks, 0,
          "When > 0, only the ids of this many most frequent ranks of each feature carry planted "
          "weights; rarer ids are drawn but weigh nothing (0: every id)");
ABSL_FLAG(int64_t, buckets, pscluster::kCriteoDefaultBuckets,
          "Rows of the models' Embedding tables, written to criteo.json: the ids' range when "
          "the folder is training data (<= 2^24); 0: int64 ids, for a chief given "
          "--embedding_unbounded");
ABSL_FLAG(bool, conversions, false,
          "Two tasks: a second label column, a conversion after the click, drawn from a planted "
          "model sharing the click model's factors (criteo.json gets \"labels\": 2); for "
          "models with two outputs, such as deploy/models/ctr_esmm.json");
ABSL_FLAG(int, history, 0,
          "Behaviour sequences: a last field of up to this many items (C1's ids) the user acted "
          "on before, drawn around a topic the user prefers; the click model gains an interest "
          "term (the history's share of the item's topic). criteo.json gets \"history\": N; "
          "for models with target attention, such as deploy/models/ctr_din.json. 0: none, at "
          "most 64");

int main(int argc, char** argv) {
  using namespace pscluster;
  ParseFlagsOrExit(argc, argv,
                   "Writes synthetic Criteo-format click logs drawn from a planted model. "
                   "Usage: criteo_synth --out=DIR [--rows=N] [--seed=S] ...");
  CriteoSynthOptions options;
  options.rows = absl::GetFlag(FLAGS_rows);
  options.ids_per_feature = absl::GetFlag(FLAGS_ids_per_feature);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.test_fraction = absl::GetFlag(FLAGS_test_fraction);
  options.zipf = absl::GetFlag(FLAGS_zipf);
  options.buckets = absl::GetFlag(FLAGS_buckets);
  options.signal_ranks = absl::GetFlag(FLAGS_signal_ranks);
  options.conversions = absl::GetFlag(FLAGS_conversions);
  options.history = absl::GetFlag(FLAGS_history);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) ExitWithUsageError("--out is required: the folder to write the files to");
  if (absl::Status s = CheckCriteoSynthOptions(options); !s.ok()) {
    ExitWithUsageError(std::string(s.message()));
  }
  const absl::StatusOr<CriteoSynthSummary> summary =
      WriteCriteoSynth(options, out, [&options](int64_t rows) {
        std::fprintf(stderr, "criteo_synth: %lld of %lld rows\n", static_cast<long long>(rows),
                     static_cast<long long>(options.rows));
      });
  if (!summary.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(summary.status().message()).c_str());
    return kExitError;
  }
  std::printf(
      "wrote %s/train.txt (%lld rows, %.4f positive), %s/test.txt (%lld rows, %.4f positive), "
      "%s/planted.json, %s/criteo.json (buckets %lld)\nplanted model on the test split: auc=%.4f "
      "log_loss=%.4f\n"
      "%.1f s, %.0f rows/s\n",
      out.c_str(), static_cast<long long>(summary->train_rows), summary->train_positive_rate,
      out.c_str(), static_cast<long long>(summary->test_rows), summary->test_positive_rate,
      out.c_str(), out.c_str(), static_cast<long long>(options.buckets), summary->test_auc,
      summary->test_log_loss, summary->seconds, double(options.rows) / summary->seconds);
  if (options.conversions) {
    std::printf("conversions: %.4f of train, %.4f of test; planted auc of click-and-convert=%.4f\n",
                summary->train_conversion_rate, summary->test_conversion_rate,
                summary->test_conversion_auc);
  }
  if (options.history > 0) {
    std::printf("histories of up to %d items; planted auc without the history's term=%.4f\n",
                options.history, summary->test_auc_without_history);
  }
  return kExitOk;
}
