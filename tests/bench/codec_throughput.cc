// Benchmark (not a test): how fast each wire encoding (wire/codec.h)
// encodes and decodes a ps's share of a large model, beside the physical
// limit measured in the same run: memcpy of the same fp32 bytes, and one
// streaming pass that reads two arrays and writes one (y = a - b), the
// least a fused change or error-feedback encoder must touch.
//
//   bazel run -c opt //tests/bench:codec_throughput -- [--floats=10000000] [--repeats=7]
//
// --floats: values of the tensor (default 10 M, one ps's half of the 20 M
// parameters of mlp_large). Gradients are normal(0, 1e-3) values, weights
// normal(0, 0.05). Per codec, the table gives the median time of each
// operation the cluster runs on every step, as GB/s of fp32 values (4 bytes
// a value / time), and its time as a multiple of memcpy's:
//
//   encode      a worker's push without error feedback, a ps's weight pull
//   decode      a ps reading a push (DecodePieces into fp32)
//   ef encode   a worker's push with error feedback (topk, sign)
//   change      a ps's change pull: encode w - shadow, shadow += what the
//               worker will decode (int8, topk, sign pulls)
//   add         a worker applying a change pull (DecodeAdd)
//
// Each operation runs --repeats times after a warm-up; the figures are the
// median. Single-threaded, as the daemons call them.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "wire/codec.h"

ABSL_FLAG(int64_t, floats, 10'000'000, "values of the tensor");
ABSL_FLAG(int, repeats, 7, "timed runs of each operation (the median is printed)");

namespace pscluster {
namespace {

template <typename F>
double MedianSeconds(int repeats, F&& f) {
  f();  // warm-up: first-touch page faults, caches
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Run(int64_t n, int repeats) {
  std::mt19937 rng(1);
  std::normal_distribution<float> grad_dist(0.0f, 1e-3f), weight_dist(0.0f, 0.05f);
  std::vector<float> grads(n), weights(n), shadow(n), out(n), scratch;
  for (float& g : grads) g = grad_dist(rng);
  for (int64_t i = 0; i < n; ++i) {
    weights[i] = weight_dist(rng);
    shadow[i] = weights[i] - grad_dist(rng);  // the worker's copy: one step behind
  }
  const double bytes = 4.0 * static_cast<double>(n);
  std::printf("codec_throughput: %lld floats (%.1f MB of fp32), median of %d runs, one thread\n",
              static_cast<long long>(n), bytes / 1e6, repeats);

  const double memcpy_s = MedianSeconds(repeats, [&] {
    std::memcpy(out.data(), grads.data(), n * sizeof(float));
  });
  const double stream_s = MedianSeconds(repeats, [&] {
    for (int64_t i = 0; i < n; ++i) out[i] = weights[i] - shadow[i];
  });
  std::printf("\n%-6s %-10s %10s %8s %10s %12s\n", "codec", "operation", "ms", "GB/s",
              "x memcpy", "wire bytes");
  auto row = [&](const char* codec, const char* op, double s, int64_t wire) {
    std::printf("%-6s %-10s %10.2f %8.2f %10.2f %12lld\n", codec, op, s * 1e3, bytes / s / 1e9,
                s / memcpy_s, static_cast<long long>(wire));
  };
  row("-", "memcpy", memcpy_s, 0);
  row("-", "y=a-b", stream_s, 0);

  const std::vector<WirePiece> pieces = {{n, false}};
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8,
                  Codec::kTopK, Codec::kSign}) {
    CodecOptions o;
    o.codec = c;
    const char* name = CodecName(c);
    std::string wire;
    const double enc_s = MedianSeconds(repeats, [&] {
      wire.clear();
      EncodePieces(o, pieces, grads.data(), &wire);
    });
    row(name, "encode", enc_s, static_cast<int64_t>(wire.size()));
    const double dec_s = MedianSeconds(repeats, [&] {
      if (!DecodePieces(o, pieces, wire, out.data()).ok()) std::abort();
    });
    row(name, "decode", dec_s, static_cast<int64_t>(wire.size()));
    if (HasErrorFeedback(c)) {
      ErrorFeedback feedback(n);
      const double ef_s = MedianSeconds(repeats, [&] {
        wire.clear();
        feedback.Encode(o, grads.data(), 0, n, &wire);
      });
      row(name, "ef encode", ef_s, static_cast<int64_t>(wire.size()));
    }
    if (PullsChanges(c)) {
      std::vector<float> s = shadow;
      const double change_s = MedianSeconds(repeats, [&] {
        wire.clear();
        EncodeChange(o, weights.data(), s.data(), n, &wire, &scratch);
      });
      row(name, "change", change_s, static_cast<int64_t>(wire.size()));
      std::vector<float> w = shadow;
      const double add_s = MedianSeconds(repeats, [&] {
        absl::string_view in(wire);
        if (!DecodeAdd(o, &in, n, w.data()).ok()) std::abort();
      });
      row(name, "add", add_s, static_cast<int64_t>(wire.size()));
    }
  }
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Encode and decode speed of each wire encoding beside memcpy.\n"
      "  codec_throughput [--floats=10000000] [--repeats=7]");
  absl::ParseCommandLine(argc, argv);
  const int64_t n = absl::GetFlag(FLAGS_floats);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (n < 1 || n > (int64_t{1} << 31)) {
    std::fprintf(stderr, "codec_throughput: --floats=%lld is out of range [1, 2^31]\n",
                 static_cast<long long>(n));
    return 2;
  }
  if (repeats < 1 || repeats > 1000) {
    std::fprintf(stderr, "codec_throughput: --repeats=%d is out of range [1, 1000]\n", repeats);
    return 2;
  }
  return pscluster::Run(n, repeats);
}
