// The CPU's fast path (kernels/onednn.h) against the CPU reference, the oracle: conv2d forward,
// data gradient and filter gradient, and linear, in fp32 on odd shapes, strides and padding,
// with and without bias, accumulating into gradients already there. Then what a training run
// relies on: the same bits run to run, the same bits when two threads run one shape at once
// (the CPU replicas), and the switch (kernels/matmul_cpu.cpp) refusing what it cannot run.
//
// The tolerance. oneDNN sums in fp32 in its own order (blocked, FMA); the oracle is the
// reference in double. A sum of n products computed in fp32 in any order is within
// n * 2^-24 * sum |products| of the exact one; here every element is compared with
// 2e-5 * (its sum of |products|) + 1e-6, where the sum of |products| is the reference run on
// |x| and |w|: a bound that scales with the element's own magnitude, tight enough that a
// wrong tap, a missing bias or a lost accumulation (all of order 1) fails.
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/onednn.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

Conv2dShape shape(int N, int H, int W, int C, int K, int R, int S, int sh, int sw, int ph,
                  int pw) {
  Conv2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.K = K, s.R = R, s.S = S;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  conv2d_check_shape(s);
  return s;
}

// The shapes: the default model's first layer (C = 1) and a middle one, resnet's strided 3x3
// and 1x1 shortcut, and odd ones: rectangular filters and inputs, unequal strides and pads,
// a filter as large as the padded input, a stride larger than the filter, one output channel.
std::vector<Conv2dShape> shapes() {
  return {shape(4, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1),  shape(2, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1),
          shape(3, 9, 9, 16, 32, 3, 3, 2, 2, 1, 1),   shape(3, 9, 9, 16, 32, 1, 1, 2, 2, 0, 0),
          shape(3, 7, 5, 3, 5, 3, 2, 2, 1, 1, 0),     shape(2, 5, 6, 7, 3, 5, 4, 1, 3, 0, 2),
          shape(1, 4, 4, 6, 9, 6, 6, 1, 1, 1, 1),     shape(5, 11, 8, 2, 1, 2, 2, 3, 3, 0, 1),
          shape(8, 28, 28, 1, 8, 3, 3, 1, 1, 1, 1),   shape(8, 14, 14, 8, 8, 3, 3, 2, 2, 1, 1),
          shape(24, 28, 28, 1, 8, 3, 3, 1, 1, 1, 1),  shape(24, 14, 14, 8, 8, 3, 3, 2, 2, 1, 1)};
}

std::string str(const Conv2dShape& s) {
  return "N" + std::to_string(s.N) + " " + std::to_string(s.H) + "x" + std::to_string(s.W) +
         "x" + std::to_string(s.C) + " K" + std::to_string(s.K) + " " + std::to_string(s.R) +
         "x" + std::to_string(s.S) + " stride " + std::to_string(s.stride_h) + "x" +
         std::to_string(s.stride_w) + " pad " + std::to_string(s.pad_h) + "x" +
         std::to_string(s.pad_w);
}

std::vector<double> random(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; i++) v[i] = rng_uniform(seed, i) * 2 - 1;
  return v;
}
std::vector<float> floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> abs_of(std::vector<double> v) {
  for (double& d : v) d = std::fabs(d);
  return v;
}

// got (fp32, oneDNN) against want (the reference in double): within 2e-5 of the element's sum
// of |terms| (`scale`, the reference on absolute values) plus 1e-6 (see the top).
void require_within(const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<double>& scale) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    const double tol = 2e-5 * scale[i] + 1e-6;
    if (!(std::fabs(double(got[i]) - want[i]) <= tol))
      REQUIRE_MESSAGE(false, "element " << i << ": got " << got[i] << ", want " << want[i]
                                        << " (tolerance " << tol << ")");
  }
}

// One shape's tensors: x, w, b, an upstream gradient dy, and the gradients already there.
struct ConvCase {
  Conv2dShape s;
  std::vector<double> x, w, b, dy, dx0, dw0, db0;
  explicit ConvCase(const Conv2dShape& sh, uint64_t seed) : s(sh) {
    const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
    const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K;
    x = random(nx, seed), w = random(nw, seed + 1), b = random(size_t(s.K), seed + 2);
    dy = random(ny, seed + 3), dx0 = random(nx, seed + 4), dw0 = random(nw, seed + 5);
    db0 = random(size_t(s.K), seed + 6);
  }
};

// The reference in double: y, dx0 + dx, dw0 + dw, db0 + db.
struct Reference {
  std::vector<double> y, dx, dw, db;
};
Reference reference(const Conv2dShape& s, const std::vector<double>& x,
                    const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& dy, Reference r) {
  r.y.assign(dy.size(), 0.0);
  conv2d_forward_cpu<double>(s, x.data(), w.data(), b.data(), r.y.data());
  conv2d_backward_data_cpu<double>(s, dy.data(), w.data(), r.dx.data());
  conv2d_backward_filter_cpu<double>(s, x.data(), dy.data(), r.dw.data(), r.db.data());
  return r;
}

}  // namespace

TEST_CASE("onednn conv2d: forward, data and filter gradients agree with the reference") {
  uint64_t seed = 100;
  for (const Conv2dShape& s : shapes()) {
    INFO(str(s) << ": " << conv2d_onednn_kernels(s));
    const ConvCase c(s, seed += 10);
    const Reference want = reference(s, c.x, c.w, c.b, c.dy, {{}, c.dx0, c.dw0, c.db0});
    // The bound's scale: every term's magnitude, and the old gradient's.
    const Reference scale = reference(s, abs_of(c.x), abs_of(c.w), abs_of(c.b), abs_of(c.dy),
                                      {{}, abs_of(c.dx0), abs_of(c.dw0), abs_of(c.db0)});
    const std::vector<float> x = floats(c.x), w = floats(c.w), b = floats(c.b), dy = floats(c.dy);
    std::vector<float> y(c.dy.size(), -999.0f), dx = floats(c.dx0), dw = floats(c.dw0),
                       db = floats(c.db0);
    conv2d_forward_onednn(s, x.data(), w.data(), b.data(), y.data());
    conv2d_backward_data_onednn(s, dy.data(), w.data(), dx.data());
    conv2d_backward_filter_onednn(s, x.data(), dy.data(), dw.data(), db.data());
    {
      INFO("forward");
      require_within(y, want.y, scale.y);
    }
    {
      INFO("data gradient (added to the one there)");
      require_within(dx, want.dx, scale.dx);
    }
    {
      INFO("filter gradient (added)");
      require_within(dw, want.dw, scale.dw);
    }
    {
      INFO("bias gradient (added)");
      require_within(db, want.db, scale.db);
    }
  }
}

TEST_CASE("onednn conv2d: no bias, and one gradient of the two") {
  const Conv2dShape s = shape(3, 7, 5, 3, 5, 3, 2, 2, 1, 1, 0);
  const ConvCase c(s, 7);
  const std::vector<double> zero_b(size_t(s.K), 0.0);
  const Reference want = reference(s, c.x, c.w, zero_b, c.dy, {{}, c.dx0, c.dw0, c.db0});
  const Reference scale = reference(s, abs_of(c.x), abs_of(c.w), zero_b, abs_of(c.dy),
                                    {{}, abs_of(c.dx0), abs_of(c.dw0), abs_of(c.db0)});
  const std::vector<float> x = floats(c.x), w = floats(c.w), dy = floats(c.dy);
  std::vector<float> y(c.dy.size(), -999.0f);
  conv2d_forward_onednn(s, x.data(), w.data(), nullptr, y.data());
  require_within(y, want.y, scale.y);
  // Only dw, then only db: each still right on its own.
  std::vector<float> dw = floats(c.dw0), db = floats(c.db0);
  conv2d_backward_filter_onednn(s, x.data(), dy.data(), dw.data(), nullptr);
  require_within(dw, want.dw, scale.dw);
  conv2d_backward_filter_onednn(s, x.data(), dy.data(), nullptr, db.data());
  require_within(db, want.db, scale.db);
}

TEST_CASE("onednn linear: forward and gradients agree with the reference") {
  struct Dims {
    int N, C, K;
  };
  uint64_t seed = 500;
  for (const Dims d : {Dims{5, 7, 3}, Dims{64, 128, 10}, Dims{1, 1, 1}, Dims{33, 9, 17}}) {
    for (const bool bias : {true, false}) {
      INFO("N " << d.N << " C " << d.C << " K " << d.K << (bias ? " bias" : " no bias"));
      seed += 10;
      const auto x = random(size_t(d.N) * d.C, seed), w = random(size_t(d.K) * d.C, seed + 1);
      const auto b = random(size_t(d.K), seed + 2), dy = random(size_t(d.N) * d.K, seed + 3);
      const auto dx0 = random(x.size(), seed + 4), dw0 = random(w.size(), seed + 5);
      const auto db0 = random(b.size(), seed + 6);
      auto ref = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                     const std::vector<double>& bb, const std::vector<double>& gg,
                     std::vector<double> dx, std::vector<double> dw, std::vector<double> db) {
        std::vector<double> y(gg.size());
        linear_forward_cpu<double>(d.N, d.C, d.K, xx.data(), ww.data(), bias ? bb.data() : nullptr,
                                   y.data());
        linear_backward_cpu<double>(d.N, d.C, d.K, xx.data(), ww.data(), gg.data(), dx.data(),
                                    dw.data(), db.data());
        return Reference{y, dx, dw, db};
      };
      const Reference want = ref(x, w, b, dy, dx0, dw0, db0);
      const Reference scale = ref(abs_of(x), abs_of(w), abs_of(b), abs_of(dy), abs_of(dx0),
                                  abs_of(dw0), abs_of(db0));
      const auto xf = floats(x), wf = floats(w), bf = floats(b), dyf = floats(dy);
      std::vector<float> y(dy.size(), -999.0f), dx = floats(dx0), dw = floats(dw0),
                         db = floats(db0);
      linear_forward_onednn(d.N, d.C, d.K, xf.data(), wf.data(), bias ? bf.data() : nullptr,
                            y.data());
      linear_backward_onednn(d.N, d.C, d.K, xf.data(), wf.data(), dyf.data(), dx.data(),
                             dw.data(), db.data());
      require_within(y, want.y, scale.y);
      require_within(dx, want.dx, scale.dx);
      require_within(dw, want.dw, scale.dw);
      require_within(db, want.db, scale.db);
    }
  }
}

namespace {
// Every pass of one shape once, from fixed inputs: the outputs side by side.
std::vector<float> all_passes(const ConvCase& c) {
  const Conv2dShape& s = c.s;
  const std::vector<float> x = floats(c.x), w = floats(c.w), b = floats(c.b), dy = floats(c.dy);
  std::vector<float> y(c.dy.size()), dx = floats(c.dx0), dw = floats(c.dw0), db = floats(c.db0);
  conv2d_forward_onednn(s, x.data(), w.data(), b.data(), y.data());
  conv2d_backward_data_onednn(s, dy.data(), w.data(), dx.data());
  conv2d_backward_filter_onednn(s, x.data(), dy.data(), dw.data(), db.data());
  std::vector<float> out = y;
  for (const auto* v : {&dx, &dw, &db}) out.insert(out.end(), v->begin(), v->end());
  return out;
}
}  // namespace

TEST_CASE("onednn conv2d: the same bits run to run, and on two threads at once") {
  // A batch large enough that oneDNN splits the work over the OpenMP threads.
  const ConvCase c(shape(16, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1), 900);
  const std::vector<float> first = all_passes(c);
  REQUIRE(all_passes(c) == first);
  // The CPU replicas run one shape's plans on several threads at once: each thread has its
  // own scratch, so each gets the bits of a lone run.
  std::vector<float> a, b;
  std::thread ta([&] { a = all_passes(c); }), tb([&] { b = all_passes(c); });
  ta.join(), tb.join();
  REQUIRE(a == first);
  REQUIRE(b == first);
}

TEST_CASE("cpu switch: direct runs the reference, onednn oneDNN; GPU choices are refused") {
  const Conv2dShape s = shape(2, 6, 6, 3, 4, 3, 3, 1, 1, 1, 1);
  const ConvCase c(s, 77);
  const std::vector<float> x = floats(c.x), w = floats(c.w), b = floats(c.b);
  std::vector<float> ref(c.dy.size()), direct(c.dy.size()), fast(c.dy.size());
  conv2d_forward_cpu<float>(s, x.data(), w.data(), b.data(), ref.data());
  conv2d_forward_cpu<float>(ConvImpl::direct, s, x.data(), w.data(), b.data(), direct.data());
  conv2d_forward_cpu<float>(ConvImpl::onednn, s, x.data(), w.data(), b.data(), fast.data());
  REQUIRE(direct == ref);  // the reference itself, bit for bit
  std::vector<float> want(c.dy.size());
  conv2d_forward_onednn(s, x.data(), w.data(), b.data(), want.data());
  REQUIRE(fast == want);
  REQUIRE_ERROR(conv2d_forward_cpu<float>(ConvImpl::tc, s, x.data(), w.data(), b.data(),
                                          fast.data()),
                "tc is a GPU implementation");
  REQUIRE_ERROR(linear_forward_cpu<float>(LinearImpl::cublas, 1, 1, 1, x.data(), w.data(),
                                          nullptr, fast.data()),
                "cublas is a GPU implementation");
  const std::vector<double> xd = c.x, wd = c.w;
  std::vector<double> yd(c.dy.size());
  REQUIRE_ERROR(conv2d_forward_cpu<double>(ConvImpl::onednn, s, xd.data(), wd.data(), nullptr,
                                           yd.data()),
                "onednn is fp32 only");
}

TEST_CASE("parse_conv_impl / parse_linear_impl: auto, the CPU's and the GPU's choices") {
  REQUIRE(parse_conv_impl("auto", true) == ConvImpl::tc);
  REQUIRE(parse_conv_impl("auto", false) == ConvImpl::onednn);
  REQUIRE(parse_linear_impl("auto", false) == LinearImpl::onednn);
  REQUIRE(parse_conv_impl("cudnn", true) == ConvImpl::cudnn);
  REQUIRE(parse_conv_impl("direct", false) == ConvImpl::direct);
  // A GPU choice on the CPU is the reference: a checkpoint of a CPU run from before onednn
  // (conv "tc") resumes on the kernels it was trained with.
  REQUIRE(parse_conv_impl("tc", false) == ConvImpl::direct);
  REQUIRE(parse_linear_impl("cublas", false) == LinearImpl::direct);
  // And the CPU's choice on a GPU is the GPU's default: a CPU run resumes on a GPU.
  REQUIRE(parse_conv_impl("onednn", true) == ConvImpl::tc);
  REQUIRE(parse_linear_impl("onednn", true) == LinearImpl::tc);
  REQUIRE_ERROR(parse_conv_impl("mkl", false),
                "--conv mkl: expected auto, direct, tc, cudnn, onednn");
  REQUIRE(onednn_version().rfind("oneDNN ", 0) == 0);
}
