// The model builder: parameter counts and shapes worked out by hand, FLOPs, build-time shape
// errors, initialisation, and forward/backward through the real ops.
#include <cmath>
#include <sstream>

#include "nn/model.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::uniform;

namespace {

std::unique_ptr<Model> build(const std::string& name, int H, int W, int C, int classes = 10,
                             DType dtype = DType::f32, uint64_t seed = 1) {
  ModelOptions o;
  o.H = H, o.W = W, o.C = C, o.classes = classes, o.dtype = dtype, o.seed = seed;
  return build_model(load_model_spec(name), o);
}

std::unique_ptr<Model> build_text(const std::string& text, int H, int W, int C,
                                  int classes = 10) {
  ModelOptions o;
  o.H = H, o.W = W, o.C = C, o.classes = classes;
  return build_model(parse_model_spec(text, "x.model"), o);
}

// The words of the table row whose first word is `name`; the last three are the output
// shape, the parameter count and the MFLOPs.
std::vector<std::string> row(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string t; words >> t;) w.push_back(t);
    if (!w.empty() && w[0] == name) return w;
  }
  FAIL("no row '" << name << "' in\n" << table);
  return {};
}
std::string out_of(const std::vector<std::string>& r) { return r[r.size() - 3]; }
std::string params_of(const std::vector<std::string>& r) { return r[r.size() - 2]; }
std::string mflops_of(const std::vector<std::string>& r) { return r[r.size() - 1]; }

VarPtr param(const Model& m, const std::string& name) {
  for (const VarPtr& p : m.parameters())
    if (p->name == name) return p;
  FAIL("no parameter " << name);
  return nullptr;
}

}  // namespace

TEST_CASE("model: parameter counts and table of the default model, by hand") {
  const auto m = build("default", 28, 28, 1);
  // conv weights K*R*S*C, no biases; BN 2*C; linear K*C + K:
  //   conv1 32*3*3*1   =    288   bn1 2*32  =  64
  //   conv2 32*3*3*32  =  9,216   bn2 2*32  =  64
  //   conv3 64*3*3*32  = 18,432   bn3 2*64  = 128
  //   conv4 64*3*3*64  = 36,864   bn4 2*64  = 128
  //   conv5 128*3*3*64 = 73,728   bn5 2*128 = 256
  //   linear1 10*128 + 10 = 1,290
  //   total 288+64+9216+64+18432+128+36864+128+73728+256+1290 = 140,458
  REQUIRE(m->parameter_count() == 140458);
  const std::string t = m->table();
  INFO(t);
  REQUIRE(params_of(row(t, "total")) == "140458");
  REQUIRE(row(t, "input") == std::vector<std::string>{"input", "(28,28,1)"});
  REQUIRE(out_of(row(t, "conv1")) == "(28,28,32)");
  REQUIRE(params_of(row(t, "conv1")) == "288");
  REQUIRE(params_of(row(t, "bn5")) == "256");
  REQUIRE(out_of(row(t, "pool1")) == "(14,14,32)");
  REQUIRE(out_of(row(t, "conv4")) == "(14,14,64)");
  REQUIRE(out_of(row(t, "pool2")) == "(7,7,64)");
  REQUIRE(out_of(row(t, "conv5")) == "(7,7,128)");
  REQUIRE(out_of(row(t, "gap1")) == "(128)");
  REQUIRE(out_of(row(t, "linear1")) == "(10)");
  REQUIRE(params_of(row(t, "linear1")) == "1290");
  REQUIRE(row(t, "conv2")[1] == "conv");  // the description column
  // FLOPs of conv2, 3x3 over a padded 28x28x32 map to 28x28x32: 2*P*Q*K*R*S*C =
  // 2*28*28*32*3*3*32 = 14,450,688 = 14.45 MFLOP.
  REQUIRE(mflops_of(row(t, "conv2")) == "14.45");
  REQUIRE(mflops_of(row(t, "bn2")) == "0.00");  // only conv and linear multiply-adds count
  // all of them: conv1 2*784*32*9 = 451,584; conv3 2*196*64*288 = 7,225,344;
  // conv4 2*196*64*576 = 14,450,688; conv5 2*49*128*576 = 7,225,344; linear1 2*128*10 = 2,560
  REQUIRE(m->forward_flops() == 451584 + 14450688 + 7225344 + 14450688 + 7225344 + 2560);
  REQUIRE(mflops_of(row(t, "total")) == "43.81");

  // more input channels: only conv1 grows, by 32*3*3*2 = 576
  REQUIRE(build("default", 32, 32, 3)->parameter_count() == 140458 + 576);
  // more classes: only linear1 grows, by 128*90 + 90 = 11,610
  REQUIRE(build("default", 28, 28, 1, 100)->parameter_count() == 140458 + 11610);
}

TEST_CASE("model: parameter counts and table of the resnet, by hand") {
  // stem conv1 32*3*3*C = 288*C, bn1 64
  // block1, block2 (32 -> 32, identity): 2 * (32*9*32 + 64) = 2 * 9,280 = 18,560 each
  // block3 (32 -> 64, stride 2): conv1 64*9*32 = 18,432 + bn 128; conv2 64*9*64 = 36,864
  //   + bn 128; shortcut 64*1*1*32 = 2,048 + bn 128                                 = 57,728
  // block4 (64 -> 64): 2 * (36,864 + 128)                                            = 73,984
  // block5 (64 -> 128, stride 2): 73,728 + 256 + 147,456 + 256 + 8,192 + 256         = 230,144
  // block6 (128 -> 128): 2 * (147,456 + 256)                                         = 295,424
  // linear1 128*10 + 10 = 1,290
  // total (C = 1): 288 + 64 + 2*18,560 + 57,728 + 73,984 + 230,144 + 295,424 + 1,290 = 696,042
  const auto m = build("resnet", 28, 28, 1);
  REQUIRE(m->parameter_count() == 696042);
  REQUIRE(build("resnet", 32, 32, 3)->parameter_count() == 696042 + 576);

  const std::string t = build("resnet", 64, 64, 3)->table();
  INFO(t);
  REQUIRE(params_of(row(t, "total")) == "696618");
  REQUIRE(out_of(row(t, "conv1")) == "(64,64,32)");
  REQUIRE(out_of(row(t, "block2")) == "(64,64,32)");
  REQUIRE(params_of(row(t, "block2")) == "18560");
  REQUIRE(out_of(row(t, "block3")) == "(32,32,64)");
  REQUIRE(params_of(row(t, "block3")) == "57728");
  REQUIRE(out_of(row(t, "block3.shortcut")) == "(32,32,64)");
  REQUIRE(params_of(row(t, "block3.shortcut")) == "2048");
  REQUIRE(row(t, "block3.conv1")[2] == "64");  // "conv 64 3x3 stride=2 pad=1"
  REQUIRE(row(t, "block3.conv1")[4] == "stride=2");
  REQUIRE(out_of(row(t, "block6")) == "(16,16,128)");
  REQUIRE(params_of(row(t, "block6")) == "295424");
  REQUIRE(out_of(row(t, "gap1")) == "(128)");
  // block3.conv1: 3x3 stride 2 from 64x64x32 to 32x32x64: 2*32*32*64*3*3*32 = 37,748,736
  REQUIRE(mflops_of(row(t, "block3.conv1")) == "37.75");
  // the block row sums its parts: conv1 37,748,736 + conv2 2*32*32*64*576 = 75,497,472
  //   + shortcut 2*32*32*64*32 = 4,194,304 -> 117,440,512
  REQUIRE(mflops_of(row(t, "block3")) == "117.44");
  // the identity block has no shortcut
  REQUIRE_FALSE(t.find("block4.shortcut") != std::string::npos);
}

TEST_CASE("model: parameter names, dtypes and the BatchNorm states") {
  const auto m = build("resnet", 32, 32, 3, 10, DType::f16);
  const auto& ps = m->parameters();
  REQUIRE(ps[0]->name == "conv1.w");
  REQUIRE(ps[0]->value.shape() == Shape{32, 3, 3, 3});
  REQUIRE(ps[1]->name == "bn1.gamma");
  REQUIRE(ps[2]->name == "bn1.beta");
  REQUIRE(ps[3]->name == "block1.conv1.w");
  REQUIRE(ps.back()->name == "linear1.b");
  for (const VarPtr& p : ps) {
    INFO(p->name);
    REQUIRE(p->requires_grad);
    const bool is_bn = p->name.find("gamma") != std::string::npos ||
                       p->name.find("beta") != std::string::npos;
    REQUIRE(p->value.dtype() == (is_bn ? DType::f32 : DType::f16));
  }
  REQUIRE(param(*m, "block3.shortcut.w")->value.shape() == Shape{64, 1, 1, 32});
  REQUIRE(param(*m, "block3.shortcut_bn.gamma")->value.shape() == Shape{64});
  REQUIRE(param(*m, "linear1.w")->value.shape() == Shape{10, 128});

  const auto& bns = m->batchnorm_states();
  // stem bn1, then per block bn1 and bn2, plus shortcut_bn in block3 and block5
  REQUIRE(bns.size() == 1 + 6 * 2 + 2);
  REQUIRE(bns[0].first == "bn1");
  REQUIRE(bns[1].first == "block1.bn1");
  REQUIRE(bns[0].second->running_mean.dtype() == DType::f32);
  REQUIRE(bns[0].second->running_mean.shape() == Shape{32});
}

TEST_CASE("model: a layer that does not fit its input names the line and the shapes") {
  REQUIRE_ERROR(build_text("conv 8 3x3\ngap\nconv 8 3x3\nlinear classes\n", 8, 8, 1),
                "x.model:3: conv needs a feature map (H,W,C), but its input is (8)");
  REQUIRE_ERROR(build_text("conv 8 3x3\nflatten\nresblock 8\nlinear classes\n", 8, 8, 1),
                "x.model:3: resblock needs a feature map");
  REQUIRE_ERROR(build_text("conv 8 3x3\nflatten\nmaxpool 2x2\nlinear classes\n", 8, 8, 1),
                "x.model:3: maxpool needs a feature map");
  REQUIRE_ERROR(build_text("conv 8 3x3\ngap\ngap\nlinear classes\n", 8, 8, 1),
                "x.model:3: gap needs a feature map");
  REQUIRE_ERROR(build_text("# a\nconv 8 3x3\nlinear classes\n", 8, 8, 1),
                "x.model:3: linear needs a vector (C), but its input is the feature map (6,6,8)");
  REQUIRE_ERROR(build_text("conv 8 3x3\nmaxpool 8x8\ngap\nlinear classes\n", 8, 8, 1),
                "x.model:2: maxpool 8x8 does not fit its input (6,6,8)");
  REQUIRE_ERROR(build_text("conv 8 5x5\ngap\nlinear classes\n", 4, 4, 1),
                "x.model:1: conv 8 5x5 does not fit its input (4,4,1)");
  REQUIRE_ERROR(build_text("conv 8 3x3\nmaxpool 2x2 pad=2\ngap\nlinear classes\n", 8, 8, 1),
                "x.model:2: maxpool 2x2 pad=2: the padding must be at most half the window");
  // the model must end with one score per class
  REQUIRE_ERROR(build_text("conv 8 3x3\ngap\nlinear 5\n", 8, 8, 1),
                "x.model:3: the model ends with (5), but it must end with one score per "
                "class, (10)");
  REQUIRE_ERROR(build_text("conv 8 3x3\n", 8, 8, 1), "x.model:1: the model ends with (6,6,8)");
  // but these fit: padding that makes room, a window equal to the map, flatten then linear
  REQUIRE(build_text("conv 8 5x5 pad=1\nmaxpool 2x2\nflatten\nlinear classes\n", 4, 4, 1)
              ->parameter_count() == 8 * 25 + 10 * 8 + 10);
  REQUIRE(build_text("maxpool 4x4\nflatten\nlinear 3 nobias\n", 4, 4, 2, 3)
              ->parameter_count() == 3 * 2);
  // past what the int shape arithmetic holds (found by the model_spec fuzz target: flatten's
  // H*W*C overflowed), refused before anything is allocated
  REQUIRE_ERROR(build_text("conv 65536 1x1 pad=65536\nflatten\nlinear classes\n", 8, 8, 1),
                "x.model:1: conv 65536 1x1 pad=65536 makes (131080,131080,65536), more than "
                "cutrain's 2^31 - 1 values an image");
  REQUIRE_ERROR(build_text("conv 8 1x1 pad=8000\nflatten\nlinear classes\n", 8, 8, 1),
                "x.model:3: linear classes needs 20500485120 weights, more than cutrain's");
  REQUIRE_ERROR(build_text("conv 65536 64x64\ngap\nlinear classes\n", 64, 64, 16),
                "x.model:1: conv 65536 64x64 needs 4294967296 weights");
  REQUIRE_ERROR(build_text("gap\nlinear classes\n", 1 << 16, 1 << 16, 1),
                "model input 65536x65536x1 is more than");
  // bad options
  REQUIRE_ERROR(build_text("gap\nlinear classes\n", 0, 8, 1), "model input must be at least");
  REQUIRE_ERROR(build_text("gap\nlinear classes\n", 8, 8, 1, 0), "need at least one class");
}

TEST_CASE("model: initialisation is a pure function of the seed") {
  const auto a = build("resnet", 28, 28, 1, 10, DType::f32, 7);
  const auto b = build("resnet", 28, 28, 1, 10, DType::f32, 7);
  const auto c = build("resnet", 28, 28, 1, 10, DType::f32, 8);
  REQUIRE(a->parameters().size() == c->parameters().size());
  for (size_t i = 0; i < a->parameters().size(); i++) {
    const VarPtr &pa = a->parameters()[i], &pb = b->parameters()[i], &pc = c->parameters()[i];
    INFO(pa->name);
    REQUIRE(pa->value.to_doubles() == pb->value.to_doubles());
    const bool weight = pa->name.size() > 2 && pa->name.substr(pa->name.size() - 2) == ".w";
    if (weight) REQUIRE(pa->value.to_doubles() != pc->value.to_doubles());
  }
  // Two weights of the same shape in one model differ (each parameter has its own stream).
  REQUIRE(param(*a, "block1.conv1.w")->value.to_doubles() !=
          param(*a, "block1.conv2.w")->value.to_doubles());

  // Kaiming normal: block6.conv2.w has 147,456 values with std sqrt(2/(3*3*128)) = 0.0417
  const std::vector<double> w = param(*a, "block6.conv2.w")->value.to_doubles();
  double sum = 0, sq = 0;
  for (double v : w) sum += v, sq += v * v;
  const double mean = sum / double(w.size());
  const double sd = std::sqrt(sq / double(w.size()) - mean * mean);
  REQUIRE(std::fabs(mean) < 0.001);
  REQUIRE(std::fabs(sd / std::sqrt(2.0 / (9 * 128)) - 1) < 0.01);
  // biases and beta 0, gamma 1, running mean 0 and variance 1
  for (double v : param(*a, "linear1.b")->value.to_doubles()) REQUIRE(v == 0);
  for (double v : param(*a, "block2.bn1.beta")->value.to_doubles()) REQUIRE(v == 0);
  for (double v : param(*a, "block2.bn1.gamma")->value.to_doubles()) REQUIRE(v == 1);
  for (const auto& bn : a->batchnorm_states()) {
    for (double v : bn.second->running_mean.to_doubles()) REQUIRE(v == 0);
    for (double v : bn.second->running_var.to_doubles()) REQUIRE(v == 1);
  }
}

// ---- forward and backward through the ops of nn/ops.h -------------------------------------
namespace {

std::vector<std::vector<double>> running_stats(const Model& m) {
  std::vector<std::vector<double>> s;
  for (const auto& bn : m.batchnorm_states()) {
    s.push_back(bn.second->running_mean.to_doubles());
    s.push_back(bn.second->running_var.to_doubles());
  }
  return s;
}

void require_finite(const Tensor& t) {
  for (double v : t.to_doubles()) REQUIRE(std::isfinite(v));
}

}  // namespace

TEST_CASE("model: forward gives (N, classes) for both built-ins at 28x28x1 and 32x32x3") {
  struct Case { const char* name; int H, W, C, classes; };
  for (const Case& c : {Case{"default", 28, 28, 1, 10}, Case{"default", 32, 32, 3, 7},
                        Case{"resnet", 28, 28, 1, 10}, Case{"resnet", 32, 32, 3, 7}}) {
    INFO(std::string(c.name) << " " << c.H << "x" << c.W << "x" << c.C);
    const auto m = build(c.name, c.H, c.W, c.C, c.classes);
    const VarPtr x = make_var(uniform({2, c.H, c.W, c.C}, DType::f32, 1));
    for (bool training : {true, false}) {
      Tape tape(Context::cpu(), false);
      const VarPtr y = m->forward(tape, x, training);
      REQUIRE(y->value.shape() == Shape{2, c.classes});
      REQUIRE(y->value.dtype() == DType::f32);
      require_finite(y->value);
    }
  }
}

TEST_CASE("model: forward in f16 gives finite f16 logits") {
  const auto m = build("default", 28, 28, 1, 10, DType::f16);
  const VarPtr x = make_var(uniform({2, 28, 28, 1}, DType::f16, 2));
  Tape tape(Context::cpu(), false);
  const VarPtr y = m->forward(tape, x, true);
  REQUIRE(y->value.shape() == Shape{2, 10});
  REQUIRE(y->value.dtype() == DType::f16);
  require_finite(y->value);
}

TEST_CASE("model: forward checks its input") {
  const auto m = build("default", 28, 28, 1);
  Tape tape(Context::cpu(), false);
  REQUIRE_ERROR(m->forward(tape, make_var(uniform({2, 28, 28, 3}, DType::f32, 1)), true),
                "input must be (N,28,28,1), got f32 cpu (2,28,28,3)");
  REQUIRE_ERROR(m->forward(tape, make_var(uniform({2, 28, 28, 1}, DType::f16, 1)), true),
                "input must be f32, got f16");
}

TEST_CASE("model: evaluation leaves the BatchNorm running statistics alone, training moves them") {
  const auto m = build("resnet", 28, 28, 1);
  const VarPtr x = make_var(uniform({2, 28, 28, 1}, DType::f32, 3));
  const auto before = running_stats(*m);
  {
    Tape tape(Context::cpu(), false);
    m->forward(tape, x, false);
  }
  REQUIRE(running_stats(*m) == before);
  {
    Tape tape(Context::cpu(), false);
    m->forward(tape, x, true);
  }
  const auto after = running_stats(*m);
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); i++) {
    INFO("statistic " << i << " (" << m->batchnorm_states()[i / 2].first << ")");
    REQUIRE(after[i] != before[i]);  // every BN's mean and variance moved
  }
}

TEST_CASE("model: gradients reach every parameter through softmax cross-entropy") {
  for (const char* name : {"default", "resnet"}) {
    INFO(std::string(name));
    const auto m = build(name, 28, 28, 1);
    const VarPtr x = make_var(uniform({2, 28, 28, 1}, DType::f32, 4));
    const Tensor labels = Tensor::from_ints({3, 8}, {2});
    Tape tape;
    const VarPtr loss = softmax_cross_entropy(tape, m->forward(tape, x, true), labels);
    REQUIRE(std::isfinite(loss->value.item()));
    // At initialisation the loss is near log(10) = 2.3; Kaiming init keeps logits O(1).
    REQUIRE(loss->value.item() > 0.5);
    REQUIRE(loss->value.item() < 10);
    tape.backward(loss);
    for (const VarPtr& p : m->parameters()) {
      INFO(p->name);
      REQUIRE(p->grad.defined());
      REQUIRE(p->grad.shape() == p->value.shape());
      bool nonzero = false;
      for (double g : p->grad.to_doubles()) {
        REQUIRE(std::isfinite(g));
        nonzero = nonzero || g != 0;
      }
      REQUIRE(nonzero);
    }
  }
}
