// The modern CNN layers' CPU kernels against the real TensorFlow.js (4.22):
// tests/fixtures/tfjs_reference/layers.json, from
// make_layers_reference.js, holds each layer's config, input, weights and
// the output tfjs computed; we run the same layer here. Every layer of the
// task is there; not from tfjs: Keras 3's hard_sigmoid slope (tfjs has Keras
// 2's 0.2), an ELU layer with alpha != 1 (tfjs refuses it), and dilated
// DepthwiseConv2D through the layer (tfjs-layers ignores its dilationRate:
// those two cases come from the core op tf.depthwiseConv2d). gelu's tanh
// form is tfjs's 'gelu_new'.
#include <fstream>
#include <string>
#include <vector>

#include "compute/kernels/activation.h"
#include "compute/kernels/convolution.h"
#include "compute/kernels/depthwise_convolution.h"
#include "compute/kernels/layer_norm.h"
#include "compute/kernels/pooling.h"
#include "compute/kernels/regularizer.h"
#include "compute/kernels/rescaling.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/testing/gradient_check.h"
#include "compute/kernels/window.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace kernels {
namespace {

using nlohmann::json;

json LoadReference() {
  std::ifstream in("tests/fixtures/tfjs_reference/layers.json");
  EXPECT_TRUE(in.good()) << "cannot read layers.json";
  return json::parse(in);
}

// The case's weight whose name ends in `/<base>`, or an empty vector.
std::vector<float> Weight(const json& c, const std::string& base) {
  for (const json& w : c["weights"]) {
    const std::string name = w["name"];
    if (name.size() > base.size() &&
        name.compare(name.size() - base.size() - 1, std::string::npos, "/" + base) == 0) {
      return w["values"].get<std::vector<float>>();
    }
  }
  return {};
}

// NHWC input + the layer's window config (kernelSize, strides, padding,
// dilationRate) as a WindowShape with out_c to be filled in.
WindowShape Window(const json& c) {
  const json& cfg = c["config"];
  const std::vector<int> shape = c["input_shape"];
  WindowShape s;
  s.batch = shape[0];
  s.in_h = shape[1];
  s.in_w = shape[2];
  s.in_c = shape[3];
  s.window_h = cfg["kernelSize"][0];
  s.window_w = cfg["kernelSize"][1];
  s.stride_h = cfg["strides"][0];
  s.stride_w = cfg["strides"][1];
  s.dilation_h = cfg["dilationRate"][0];
  s.dilation_w = cfg["dilationRate"][1];
  const bool same = cfg["padding"] == "same";
  KerasDilatedWindow(s.in_h, s.window_h, s.stride_h, s.dilation_h, same, &s.out_h, &s.pad_top);
  KerasDilatedWindow(s.in_w, s.window_w, s.stride_w, s.dilation_w, same, &s.out_w, &s.pad_left);
  return s;
}

// Runs the case's layer on its input with our CPU kernels.
std::vector<float> RunLayer(const json& c) {
  const std::string cls = c["class_name"];
  const json& cfg = c["config"];
  const std::vector<int> shape = c["input_shape"];
  const std::vector<float> x = c["x"].get<std::vector<float>>();
  std::vector<float> y(c["y"].size());
  if (cls == "ZeroPadding2D") {
    const PaddingShape s{shape[0],
                         shape[1],
                         shape[2],
                         shape[3],
                         cfg["padding"][0][0],
                         cfg["padding"][0][1],
                         cfg["padding"][1][0],
                         cfg["padding"][1][1]};
    ZeroPad2DForward(s, x.data(), y.data());
  } else if (cls == "DepthwiseConv2D") {
    WindowShape s = Window(c);
    s.out_c = s.in_c * cfg["depthMultiplier"].get<int>();
    const std::vector<float> b = Weight(c, "bias");
    DepthwiseConvForward(s, x.data(), Weight(c, "depthwise_kernel").data(),
                         b.empty() ? nullptr : b.data(), y.data());
  } else if (cls == "SeparableConv2D") {
    WindowShape d = Window(c);
    const std::vector<float> dw = Weight(c, "depthwise_kernel");
    d.out_c = static_cast<int>(dw.size()) / (d.window_h * d.window_w);
    const WindowShape p = PointwiseShape(d, cfg["filters"]);
    std::vector<float> mid(d.out_pixels() * d.out_c), columns(p.out_pixels() * p.patch_size());
    DepthwiseConvForward(d, x.data(), dw.data(), nullptr, mid.data());
    ConvGeneralForward(p, mid.data(), Weight(c, "pointwise_kernel").data(),
                       Weight(c, "bias").data(), columns.data(), y.data());
  } else if (cls == "Conv2D") {
    WindowShape s = Window(c);
    s.out_c = cfg["filters"];
    const std::vector<float> b = Weight(c, "bias");
    std::vector<float> columns(s.out_pixels() * s.patch_size());
    ConvGeneralForward(s, x.data(), Weight(c, "kernel").data(), b.empty() ? nullptr : b.data(),
                       columns.data(), y.data());
  } else if (cls == "GlobalMaxPooling2D") {
    std::vector<float> count(y.size());
    GlobalMaxPoolForward(shape[0], shape[1] * shape[2], shape[3], x.data(), y.data(), count.data());
  } else if (cls == "LayerNormalization") {
    const int channels = shape.back();
    const int64_t rows = static_cast<int64_t>(x.size()) / channels;
    std::vector<float> mean(rows), rstd(rows);
    LayerNormForward(rows, channels, x.data(), Weight(c, "gamma").data(), Weight(c, "beta").data(),
                     cfg["epsilon"].get<float>(), mean.data(), rstd.data(), y.data());
  } else if (cls == "Rescaling") {
    RescaleForward(x.size(), cfg["scale"].get<float>(), cfg["offset"].get<float>(), x.data(),
                   y.data());
  } else if (cls == "ELU") {
    ActivationForwardX(x.size(), ActivationFn::kElu, cfg["alpha"].get<float>(), x.data(), y.data());
  } else if (cls == "LeakyReLU") {
    ActivationForwardX(x.size(), ActivationFn::kLeakyRelu, cfg["alpha"].get<float>(), x.data(),
                       y.data());
  } else if (cls == "Activation") {
    const std::string a = cfg["activation"];
    // tfjs's defaults: elu alpha 1, hardSigmoid Keras 2's slope 0.2.
    const ActivationFn f = a == "gelu"          ? ActivationFn::kGelu
                           : a == "gelu_new"    ? ActivationFn::kGeluTanh
                           : a == "swish"       ? ActivationFn::kSwish
                           : a == "elu"         ? ActivationFn::kElu
                           : a == "hardSigmoid" ? ActivationFn::kHardSigmoid
                                                : ActivationFn::kRelu;
    EXPECT_TRUE(a == "gelu" || a == "gelu_new" || a == "swish" || a == "elu" || a == "hardSigmoid")
        << a;
    ActivationForwardX(x.size(), f, f == ActivationFn::kHardSigmoid ? 0.2f : 1.0f, x.data(),
                       y.data());
  } else {
    ADD_FAILURE() << "no kernel for " << cls;
  }
  return y;
}

TEST(TfjsReferenceTest, EveryLayerMatchesTensorFlowJs) {
  const json ref = LoadReference();
  ASSERT_EQ(ref["generated_by"], "tfjs 4.22.0");
  ASSERT_EQ(ref["cases"].size(), 20u);
  for (const json& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<float> y = RunLayer(c);
    const std::vector<float> want = c["y"].get<std::vector<float>>();
    // float32 both sides, sums in another order: a few ulps of the terms.
    EXPECT_TRUE(testing::GradientsNear(y.data(), std::vector<double>(want.begin(), want.end()),
                                       2e-6, 2e-6));
  }
}

TEST(TfjsReferenceTest, RegularizersMatchTensorFlowJs) {
  const json ref = LoadReference();
  ASSERT_EQ(ref["regularizers"].size(), 2u);
  for (const json& r : ref["regularizers"]) {
    SCOPED_TRACE(r["name"].get<std::string>());
    const std::vector<float> w = r["w"].get<std::vector<float>>();
    const double got =
        RegularizerLoss(w.size(), r["l1"].get<float>(), r["l2"].get<float>(), w.data());
    EXPECT_NEAR(got, r["value"].get<double>(), 1e-6 * r["value"].get<double>());
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
