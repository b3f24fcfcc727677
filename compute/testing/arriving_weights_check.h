// For the networks' tests: one training step on weights that arrive piece
// by piece while it runs (CpuNetwork::set_params_wait, fed from a
// ParamsWatermark as the ps client feeds it) must end bit for bit where a
// step on whole weights ends.
#ifndef PSCLUSTER_COMPUTE_TESTING_ARRIVING_WEIGHTS_CHECK_H_
#define PSCLUSTER_COMPUTE_TESTING_ARRIVING_WEIGHTS_CHECK_H_

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "compute/cpu_network.h"
#include "gtest/gtest.h"
#include "model/params_watermark.h"

namespace pscluster {
namespace testing_models {

// The variables arrive in model order but in pairs swapped (as from two
// ps, each answering in model order), a millisecond apart, into a buffer
// that holds NaN until they do: a forward pass that read a layer's weights
// before they were in would make the gradient NaN.
inline void CheckStepOnArrivingWeights(CpuNetwork& net, const float* params, const float* images,
                                       const float* labels, int batch,
                                       const std::string& what) {
  const ModelSpec& spec = net.spec();
  const int64_t n = spec.num_parameters;
  std::vector<float> plain(n), grads(n, NAN), arriving(n, NAN);
  float loss = 0, arriving_loss = 0;
  int correct = 0, arriving_correct = 0;
  ASSERT_TRUE(net.TrainStep(params, images, labels, batch, plain.data(), &loss, &correct, 3).ok());
  ParamsWatermark arrived(n);
  arrived.Reset();
  std::mutex mu;
  std::vector<int64_t> asked;
  net.set_params_wait([&](int64_t to) {
    {
      std::lock_guard<std::mutex> l(mu);
      asked.push_back(to);
    }
    EXPECT_TRUE(arrived.WaitArrived(to).ok());
  });
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (const VariableSpec& v : spec.variables) pieces.emplace_back(v.offset, v.offset + v.size);
  for (size_t k = 0; k + 1 < pieces.size(); k += 2) std::swap(pieces[k], pieces[k + 1]);
  std::thread feeder([&] {
    for (const auto& [begin, end] : pieces) {
      absl::SleepFor(absl::Milliseconds(1));
      std::memcpy(arriving.data() + begin, params + begin, (end - begin) * sizeof(float));
      arrived.MarkArrived(begin, end);
    }
  });
  const absl::Status s = net.TrainStep(arriving.data(), images, labels, batch, grads.data(),
                                       &arriving_loss, &arriving_correct, 3);
  feeder.join();
  net.set_params_wait(nullptr);
  ASSERT_TRUE(s.ok()) << what << ": " << s;
  EXPECT_EQ(grads, plain) << what;
  EXPECT_EQ(std::memcmp(&arriving_loss, &loss, sizeof(loss)), 0) << what;
  EXPECT_EQ(arriving_correct, correct) << what;
  ASSERT_FALSE(asked.empty()) << what;
  int64_t least = n, most = 0;
  for (int64_t to : asked) {
    least = std::min(least, to);
    most = std::max(most, to);
  }
  EXPECT_LT(least, n) << what << ": the first layer should wait for its own weights only";
  int64_t end_of_all = 0;
  for (const auto& [begin, end] : pieces) end_of_all = std::max(end_of_all, end);
  EXPECT_EQ(most, end_of_all) << what << ": the last layer waits for everything";
}

}  // namespace testing_models
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_TESTING_ARRIVING_WEIGHTS_CHECK_H_
