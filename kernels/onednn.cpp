// conv2d and linear through oneDNN (onednn.h says what and why).
//
// The oneDNN objects, for a reader who has not met them: an `engine` is the device (here the
// CPU), a `stream` the queue work runs on (on the CPU: the calling thread, with OpenMP inside),
// a `memory::desc` a tensor's shape and layout, a `primitive_desc` the plan oneDNN picked for
// one operation on given descs (which kernel, which layouts it wants, how much scratch), and a
// `primitive` that plan made executable. Making a plan costs up to milliseconds, so each
// convolution shape gets its three plans once (ConvPlans) and keeps them.
#include "kernels/onednn.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/elementwise.h"
#include "kernels/parallel.h"

namespace cutrain {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type f32 = memory::data_type::f32;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Each thread queues on its own stream (a CPU stream runs work on the thread that submits it).
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// The plans ask for their scratch memory from us (scratchpad_mode::user) instead of keeping a
// buffer of their own: then one plan can run on several threads at once (the CPU replicas).
dnnl::primitive_attr user_scratch() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A thread's scratch buffers, grown as needed and kept: scratchpad, filters in oneDNN's layout,
// the gradients before they are added to the caller's.
struct Scratch {
  std::vector<float> pad, filter, grad, bias, zeros;
};
Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}
float* grow(std::vector<float>& v, size_t bytes) {
  const size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
  if (v.size() < n) v.resize(n);
  return v.data();
}
memory scratchpad(const memory::desc& md) {
  return memory(md, cpu_engine(), grow(thread_scratch().pad, md.get_size()));
}

// A reorder between two layouts of one tensor, or none when they are the same.
struct Reorder {
  memory::desc from, to;
  std::unique_ptr<dnnl::reorder::primitive_desc> pd;
  std::unique_ptr<dnnl::reorder> prim;

  Reorder(const memory::desc& a, const memory::desc& b) : from(a), to(b) {
    if (a == b) return;
    pd = std::make_unique<dnnl::reorder::primitive_desc>(cpu_engine(), a, cpu_engine(), b,
                                                         user_scratch());
    prim = std::make_unique<dnnl::reorder>(*pd);
  }
  bool needed() const { return prim != nullptr; }
  void run(const float* src, float* dst) const {
    dnnl::stream& st = thread_stream();
    prim->execute(st, {{DNNL_ARG_FROM, memory(from, cpu_engine(), const_cast<float*>(src))},
                       {DNNL_ARG_TO, memory(to, cpu_engine(), dst)},
                       {DNNL_ARG_SCRATCHPAD, scratchpad(pd->scratchpad_desc())}});
  }
};

// One convolution shape's three plans. The activations stay NHWC (our layout; oneDNN's fast
// kernels take it); the filters are `any`: oneDNN picks a blocked layout (KRSC would get its
// reference loops, hundreds of times slower), and the reorders move them in and out of it.
// The forward always has a bias (zeros for a conv without one), so one set of plans serves
// both kinds of layer and the backward plans are made from the forward that runs.
struct ConvPlans {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc filter_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights filter;
  Reorder w_to_fwd, w_to_data, dw_from_filter;
  memory::desc x_md, y_md, b_md;

  static memory::dims dims(std::initializer_list<int> d) {
    return memory::dims(d.begin(), d.end());
  }

  explicit ConvPlans(const Conv2dShape& s)
      : ConvPlans(s, memory::desc(dims({s.N, s.C, s.H, s.W}), f32, Tag::nhwc),
                  memory::desc(dims({s.N, s.K, s.P(), s.Q()}), f32, Tag::nhwc),
                  memory::desc(dims({s.K, s.C, s.R, s.S}), f32, Tag::any),
                  memory::desc(dims({s.K}), f32, Tag::x)) {}

  ConvPlans(const Conv2dShape& s, const memory::desc& x, const memory::desc& y,
            const memory::desc& w_any, const memory::desc& b)
      : fwd_pd(dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                dnnl::algorithm::convolution_direct, x, w_any,
                                                b, y, strides(s), pads(s), pads(s)),
               user_scratch(), cpu_engine()),
        data_pd(dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x,
                                                      w_any, y, strides(s), pads(s), pads(s)),
                user_scratch(), cpu_engine(), fwd_pd),
        filter_pd(dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                           x, w_any, b, y, strides(s), pads(s),
                                                           pads(s)),
                  user_scratch(), cpu_engine(), fwd_pd),
        fwd(fwd_pd), data(data_pd), filter(filter_pd),
        w_to_fwd(krsc(s), fwd_pd.weights_desc()),
        w_to_data(krsc(s), data_pd.weights_desc()),
        dw_from_filter(filter_pd.diff_weights_desc(), krsc(s)),
        x_md(x), y_md(y), b_md(b) {}

  static memory::desc krsc(const Conv2dShape& s) {  // our filter layout: (K, R, S, C)
    return memory::desc(dims({s.K, s.C, s.R, s.S}), f32, Tag::ohwi);
  }
  static memory::dims strides(const Conv2dShape& s) { return dims({s.stride_h, s.stride_w}); }
  static memory::dims pads(const Conv2dShape& s) { return dims({s.pad_h, s.pad_w}); }
};

// The plans of every shape met so far, made on first use and kept for the process's life
// (a training run meets a few shapes per layer: the batch, the last evaluation batch). A plan
// splits its work for the thread count it was made under (compute_threads() then) and runs
// on that many threads whatever the count later, so the count is part of the key: a caller
// that asks for another count (OMP_NUM_THREADS, set_compute_threads) gets its own plan.
const ConvPlans& conv_plans(const Conv2dShape& s) {
  using Key = std::array<int, 12>;
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<ConvPlans>> plans;
  const Key key{s.N, s.H,        s.W,        s.C,     s.K,     s.R,
                s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w, compute_threads()};
  std::lock_guard<std::mutex> lock(mu);
  auto& p = plans[key];
  if (!p) {
    try {
      p = std::make_unique<ConvPlans>(s);
    } catch (const dnnl::error& e) {
      CHECK(false, "oneDNN has no convolution for N " << s.N << ", " << s.H << "x" << s.W << "x"
                                                      << s.C << " -> " << s.K << " filters "
                                                      << s.R << "x" << s.S << ": " << e.what());
    }
  }
  return *p;
}

// The filter in the layout `r` wants: w itself when none is needed, else a thread scratch copy.
const float* filter_for(const Reorder& r, const float* w) {
  if (!r.needed()) return w;
  float* out = grow(thread_scratch().filter, r.to.get_size());
  r.run(w, out);
  return out;
}

memory mem(const memory::desc& md, const float* p) {
  return memory(md, cpu_engine(), const_cast<float*>(p));  // oneDNN takes void*; reads only
}

}  // namespace

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y) {
  const ConvPlans& c = conv_plans(s);
  const float* wl = filter_for(c.w_to_fwd, w);
  if (!b) {  // the plan adds a bias: zeros (grown, never written)
    std::vector<float>& z = thread_scratch().zeros;
    if (z.size() < size_t(s.K)) z.resize(size_t(s.K), 0.0f);
    b = z.data();
  }
  c.fwd.execute(thread_stream(),
                {{DNNL_ARG_SRC, mem(c.x_md, x)},
                 {DNNL_ARG_WEIGHTS, mem(c.fwd_pd.weights_desc(), wl)},
                 {DNNL_ARG_BIAS, mem(c.b_md, b)},
                 {DNNL_ARG_DST, mem(c.y_md, y)},
                 {DNNL_ARG_SCRATCHPAD, scratchpad(c.fwd_pd.scratchpad_desc())}});
}

void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w,
                                 float* dx) {
  const ConvPlans& c = conv_plans(s);
  const float* wl = filter_for(c.w_to_data, w);
  const size_t n = size_t(s.N) * s.H * s.W * s.C;
  float* g = grow(thread_scratch().grad, n * sizeof(float));
  c.data.execute(thread_stream(), {{DNNL_ARG_DIFF_DST, mem(c.y_md, dy)},
                                   {DNNL_ARG_WEIGHTS, mem(c.data_pd.weights_desc(), wl)},
                                   {DNNL_ARG_DIFF_SRC, mem(c.x_md, g)},
                                   {DNNL_ARG_SCRATCHPAD, scratchpad(c.data_pd.scratchpad_desc())}});
  accumulate_cpu<float>(int64_t(n), g, dx);  // dx += the pass's result
}

void conv2d_backward_filter_onednn(const Conv2dShape& s, const float* x, const float* dy,
                                   float* dw, float* db) {
  if (!dw && !db) return;
  const ConvPlans& c = conv_plans(s);
  Scratch& t = thread_scratch();
  const size_t filter = size_t(s.K) * s.R * s.S * s.C;
  // oneDNN writes the filter gradient in its layout (t.grad) and the bias gradient (t.bias);
  // both are then added to the caller's, the filter through KRSC (t.filter).
  float* gl = grow(t.grad, c.filter_pd.diff_weights_desc().get_size());
  float* gb = grow(t.bias, size_t(s.K) * sizeof(float));
  c.filter.execute(thread_stream(),
                   {{DNNL_ARG_SRC, mem(c.x_md, x)},
                    {DNNL_ARG_DIFF_DST, mem(c.y_md, dy)},
                    {DNNL_ARG_DIFF_WEIGHTS, mem(c.filter_pd.diff_weights_desc(), gl)},
                    {DNNL_ARG_DIFF_BIAS, mem(c.b_md, gb)},
                    {DNNL_ARG_SCRATCHPAD, scratchpad(c.filter_pd.scratchpad_desc())}});
  if (dw) {
    const float* g = gl;
    if (c.dw_from_filter.needed()) {
      float* plain = grow(t.filter, filter * sizeof(float));
      c.dw_from_filter.run(gl, plain);
      g = plain;
    }
    accumulate_cpu<float>(int64_t(filter), g, dw);
  }
  if (db) accumulate_cpu<float>(s.K, gb, db);
}

// linear as GEMMs, row-major (dnnl_sgemm: C = alpha op(A) op(B) + beta C):
//   y  (N,K)  = x (N,C) w^T (C,K) [+ b]    M=N, N=K, K=C   beta 0, or 1 over rows of b
//   dx (N,C) += dy (N,K) w (K,C)           beta 1
//   dw (K,C) += dy^T (K,N) x (N,C)         beta 1
void linear_forward_onednn(int N, int C, int K, const float* x, const float* w, const float* b,
                           float* y) {
  if (b)
    for (int n = 0; n < N; n++) std::copy(b, b + K, y + size_t(n) * K);
  const dnnl::status st = dnnl::sgemm('N', 'T', N, K, C, 1.0f, x, C, w, C, b ? 1.0f : 0.0f, y, K);
  CHECK(st == dnnl::status::success, "oneDNN sgemm failed (linear forward " << N << "x" << C
                                                                           << " -> " << K << ")");
}

void linear_backward_onednn(int N, int C, int K, const float* x, const float* w,
                            const float* dy, float* dx, float* dw, float* db) {
  if (dx)
    CHECK(dnnl::sgemm('N', 'N', N, C, K, 1.0f, dy, K, w, C, 1.0f, dx, C) ==
              dnnl::status::success,
          "oneDNN sgemm failed (linear backward data)");
  if (dw)
    CHECK(dnnl::sgemm('T', 'N', K, C, N, 1.0f, dy, K, x, C, 1.0f, dw, C) ==
              dnnl::status::success,
          "oneDNN sgemm failed (linear backward weights)");
  if (db)  // N*K adds, as in the reference (blocked pairwise over the batch)
    for (int k = 0; k < K; k++)
      db[k] += blocked_sum<float>(N, [&](int64_t n) { return dy[size_t(n) * K + k]; });
}

std::string conv2d_onednn_kernels(const Conv2dShape& s) {
  const ConvPlans& c = conv_plans(s);
  std::ostringstream os;
  os << "fwd " << c.fwd_pd.impl_info_str() << ", bwd-data " << c.data_pd.impl_info_str()
     << ", bwd-filter " << c.filter_pd.impl_info_str();
  return os.str();
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  std::ostringstream os;
  os << "oneDNN " << v->major << "." << v->minor << "." << v->patch
     << (v->cpu_runtime == DNNL_RUNTIME_OMP ? " (OpenMP)" : "");
  return os.str();
}

}  // namespace cutrain
