#include "evaluator/evaluator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compute/backend_factory.h"
#include "compute/scoring.h"
#include "model/dataset.h"
#include "model/keras_model.h"
#include "model/sparse_layout.h"
#include "spdlog/spdlog.h"

namespace pscluster {

absl::Status Evaluator::Prepare(const std::atomic<bool>* stop) {
  absl::StatusOr<std::unique_ptr<ChiefClient>> chief =
      ChiefClient::Create(options_.config.cluster);
  if (!chief.ok()) return chief.status();
  absl::StatusOr<TrainingPlan> plan =
      (*chief)->WaitForPlan(options_.config.task, options_.startup_timeout, stop);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan->model(), plan->model_json(), plan->loss());
  if (!spec.ok()) return spec.status();
  absl::StatusOr<Dataset> test = LoadDataset(options_.data_dir, Split::kTest, OutputNames(*spec));
  if (!test.ok()) return absl::DataLossError(test.status().message());
  if (absl::Status s = CheckDatasetFitsModel(*test, options_.data_dir, *spec); !s.ok()) {
    return absl::DataLossError(s.message());  // the evaluator exits kExitBadData
  }
  // Sparse tables: the test set's ids are renumbered once, and each
  // evaluation pulls the rows of the ids it names into a window of them.
  std::unique_ptr<SparseBatch> sparse;
  if (!plan->dense_embeddings() && plan->strategy() != MULTI_WORKER_MIRRORED) {
    absl::StatusOr<std::vector<SparseTableInfo>> tables = FindSparseTables(*spec);
    if (!tables.ok()) return tables.status();
    if (plan->embedding_unbounded()) MakeUnbounded(&*tables);
    if (!tables->empty()) {
      const int64_t example_size = int64_t{test->height} * test->width * test->channels;
      if (absl::Status s = CheckIdsRead(*tables, test->ids_first, test->ids_per_example);
          !s.ok()) {
        return absl::DataLossError(absl::StrCat(options_.data_dir, ": ", s.message()));
      }
      const ExampleIds ids{test->ids.data(), test->ids_first, test->ids_per_example};
      RowWindow count(*tables);
      std::vector<float> mapped;
      if (absl::Status s = count.Map(test->images.data(), ids, test->count, example_size,
                                     int64_t{test->count} * example_size, &mapped);
          !s.ok()) {
        return absl::DataLossError(absl::StrCat(options_.data_dir, ": ", s.message()));
      }
      const int64_t window = count.widest();
      *spec = WithSparseTables(*spec, window, &*tables);
      sparse = std::make_unique<SparseBatch>(*tables, window, plan->num_ps());
      if (absl::Status s = sparse->Map(test->images.data(), ids, test->count, example_size);
          !s.ok()) {
        return absl::DataLossError(s.message());
      }
      test->images = sparse->mapped();
      test->ids.clear();  // renumbered into the images
      test->ids_per_example = 0;
    }
  }
  if (test->ids_per_example > 0 && sparse == nullptr) {
    return absl::DataLossError(absl::StrCat(
        options_.data_dir, ": ",
        CheckIdsRead({}, test->ids_first, test->ids_per_example).message()));
  }
  std::unique_ptr<Placement> placement;
  PlacementOptions popt;
  PsClientOptions psopt;
  std::unique_ptr<PsClient> ps;
  std::unique_ptr<RingClient> replicas;
  if (plan->strategy() == MULTI_WORKER_MIRRORED) {
    // No ps: every worker holds the weights.
    replicas = std::make_unique<RingClient>(options_.config.cluster, stop);
  } else {
    popt.min_shard_bytes = plan->min_shard_bytes();
    popt.max_ps = plan->placement_max_ps();
    placement = std::make_unique<Placement>(PlaceVariables(*spec, plan->num_ps(), popt));
    // A stop (the chief ends the run) cancels a pull in flight: the ps may
    // be gone already, and the evaluator would wait out the pull's deadline.
    psopt.stop = stop;
    psopt.locate = LocateThroughChief(chief->get());
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options_.config.cluster, placement.get(), psopt);
    if (!client.ok()) return client.status();
    ps = *std::move(client);
  }
  BackendOptions bopt;
  bopt.device = options_.device;
  bopt.max_batch = kScoringBatch;
  bopt.num_threads = options_.threads;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(*spec, bopt);
  if (!backend.ok()) return backend.status();

  absl::MutexLock lock(&mu_);
  spec_ = *std::move(spec);
  placement_ = std::move(placement);
  placement_options_ = popt;
  ps_options_ = psopt;
  test_ = *std::move(test);
  chief_ = *std::move(chief);
  ps_ = std::move(ps);
  sparse_ = std::move(sparse);
  replicas_ = std::move(replicas);
  backend_ = *std::move(backend);
  params_.resize(spec_.num_parameters);
  if (!options_.logdir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Create(options_.logdir, ".evaluator");
    if (!w.ok()) return w.status();
    tensorboard_ = *std::move(w);
    spdlog::info("TensorBoard events: {}", tensorboard_->path());
  }
  ready_ = true;
  spdlog::info("evaluating {} on {} test examples on {}", spec_.name, test_.count,
               backend_->name());
  return absl::OkStatus();
}

absl::Status Evaluator::FollowPlacement() {
  absl::StatusOr<PlacementResponse> where = chief_->GetPlacement(absl::Seconds(10));
  if (!where.ok()) return absl::OkStatus();  // the pull finds out, and retries
  const int num_ps = where->ps_addresses_size();
  if (num_ps == 0 || num_ps == placement_->num_ps) return absl::OkStatus();
  if (sparse_ != nullptr) sparse_->SetNumPs(num_ps);  // the test set's rows, spread anew
  spdlog::info("the shards are placed over {} ps now (were {})", num_ps, placement_->num_ps);
  ps_.reset();  // it borrows placement_
  *placement_ = PlaceVariables(spec_, num_ps, placement_options_);
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(options_.config.cluster, placement_.get(), ps_options_);
  if (!client.ok()) return client.status();
  ps_ = *std::move(client);
  return absl::OkStatus();
}

absl::StatusOr<EvalReport> Evaluator::Evaluate(int64_t min_version, bool final) {
  absl::MutexLock lock(&mu_);
  return EvaluateLocked(min_version, final, /*only_if_new=*/false, absl::Minutes(5));
}

absl::StatusOr<EvalReport> Evaluator::EvaluateLocked(int64_t min_version, bool final,
                                                     bool only_if_new,
                                                     absl::Duration pull_timeout) {
  if (!ready_) return absl::UnavailableError("the evaluator is still starting");
  int64_t version = 0;
  absl::Status s;
  if (replicas_ != nullptr) {
    s = replicas_->ReadWeights(min_version, pull_timeout, &params_, &version);
  } else {
    s = FollowPlacement();
    if (s.ok()) s = ps_->PullAll(min_version, params_.data(), pull_timeout);
    version = ps_->version();
    if (s.ok() && sparse_ != nullptr) {
      s = sparse_->Pull(ps_.get(), version, -1, pull_timeout, params_.data());
    }
  }
  if (!s.ok()) return s;
  if (only_if_new && version == last_version_) {
    return absl::AlreadyExistsError("no new weights since the last evaluation");
  }
  TestScore score;
  s = ScoreOnDataset(*backend_, spec_, params_.data(), test_, &score);
  if (!s.ok()) return s;
  EvalReport r;
  r.set_version(version);
  r.set_examples(test_.count);
  r.set_accuracy(static_cast<float>(score.accuracy));
  r.set_loss(static_cast<float>(score.loss));
  r.set_auc(static_cast<float>(score.auc));
  for (const OutputScore& o : score.outputs) {
    OutputEval* e = r.add_outputs();
    e->set_name(o.name);
    e->set_accuracy(static_cast<float>(o.accuracy));
    e->set_loss(static_cast<float>(o.loss));
    e->set_auc(static_cast<float>(o.auc));
  }
  r.set_final(final);
  last_version_ = r.version();
  spdlog::info("eval: step={} {}{}", r.version(),
               ScoreText(spec_.loss, score.accuracy, score.auc, score.loss, score.outputs, ""),
               final ? " (final)" : "");
  if (options_.metrics != nullptr) {
    options_.metrics->accuracy().Set(r.accuracy());
    options_.metrics->loss().Set(r.loss());
    options_.metrics->model_version().Set(static_cast<double>(r.version()));
  }
  if (tensorboard_) {
    std::vector<std::pair<std::string, float>> scalars = {{"eval/loss", r.loss()}};
    if (score.outputs.empty()) scalars.push_back({"eval/accuracy", r.accuracy()});
    if (score.outputs.empty() && spec_.loss == LossKind::kBinaryCrossentropy) {
      scalars.push_back({"eval/auc", r.auc()});
    }
    for (const OutputScore& o : score.outputs) {
      scalars.push_back({"eval/" + o.name + "_loss", static_cast<float>(o.loss)});
      scalars.push_back({"eval/" + o.name + "_accuracy", static_cast<float>(o.accuracy)});
      if (o.auc >= 0) scalars.push_back({"eval/" + o.name + "_auc", static_cast<float>(o.auc)});
    }
    absl::Status ts = tensorboard_->AddScalars(r.version(), scalars);
    if (!ts.ok()) spdlog::warn("TensorBoard: {}", std::string(ts.message()));
  }
  if (absl::Status rs = chief_->ReportEval(r); !rs.ok() && !final) {
    spdlog::warn("{}", std::string(rs.message()));
  }
  return r;
}

void Evaluator::RunPeriodic(const std::atomic<bool>* stop) {
  absl::Time next = absl::Now() + options_.interval;
  while (!*stop) {
    if (absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    next = absl::Now() + options_.interval;
    absl::MutexLock lock(&mu_);
    absl::StatusOr<EvalReport> r = EvaluateLocked(
        0, false, /*only_if_new=*/true, std::max(options_.interval, absl::Seconds(10)));
    if (!r.ok() && !absl::IsAlreadyExists(r.status())) {
      spdlog::warn("periodic evaluation failed: {}", std::string(r.status().message()));
    }
    if (options_.stop_when_chief_gone && !r.ok() && !chief_->Alive(absl::Seconds(5))) {
      spdlog::info("the chief no longer answers: training is over");
      return;
    }
  }
}

}  // namespace pscluster
