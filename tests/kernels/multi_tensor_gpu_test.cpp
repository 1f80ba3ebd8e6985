// The multi-tensor optimizer steps on the GPU (kernels/multi_tensor.h) against their CPU
// references, bit for bit: one launch over slots of both dtypes whose sizes cross the chunk
// boundaries (the masters, the states, the working copies; every gradient zeroed), skipped
// or not, with and without the moving averages (--ema: every parameter's and two
// averaged-only slots'); the check raising exactly the flags of the poisoned slots, the
// averaged-only slots left out. Skips without a GPU.
#include <cmath>
#include <vector>

#include "kernels/multi_tensor.h"
#include "kernels/rng.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/kernels/step_state_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

const std::vector<int64_t> kSizes = {288, 32, 32, 9216, kParamChunk + 1, 1, 3 * kParamChunk};

// One slot's values on the host: the gradient and working copy in T (float slots: no working
// copy), the master and two states in fp32.
struct HostSlot {
  bool half = false;
  bool averaged_only = false;  // a BatchNorm statistic: master and ema only
  std::vector<half_t> gh, wh;
  std::vector<float> gf, master, s1, s2, ema;  // ema empty: no average
};

// With averages: every slot gets one, and two averaged-only slots follow (one crossing a chunk
// boundary).
void add_averages(std::vector<HostSlot>& hs, uint64_t seed) {
  for (size_t i = 0; i < hs.size(); i++)
    hs[i].ema = random_values<float>(hs[i].master.size(), seed + 100 + i);
  for (int64_t n : {int64_t(64), kParamChunk + 5}) {
    HostSlot h;
    h.averaged_only = true;
    h.master = random_values<float>(size_t(n), seed + 200 + uint64_t(n), 0, 2);
    h.ema = random_values<float>(size_t(n), seed + 300 + uint64_t(n), 0, 2);
    hs.push_back(std::move(h));
  }
}

std::vector<HostSlot> make_host(uint64_t seed) {
  std::vector<HostSlot> out;
  for (size_t i = 0; i < kSizes.size(); i++) {
    HostSlot h;
    h.half = i % 3 != 1;
    const size_t n = size_t(kSizes[i]);
    h.master = random_values<float>(n, seed + 10 * i);
    h.s1 = random_values<float>(n, seed + 10 * i + 1, -0.1, 0.1);
    h.s2 = random_values<float>(n, seed + 10 * i + 2, 0, 0.01);
    if (h.half) {
      h.gh = random_values<half_t>(n, seed + 10 * i + 3, -512, 512);
      h.wh = random_values<half_t>(n, seed + 10 * i + 4);
    } else {
      h.gf = random_values<float>(n, seed + 10 * i + 3, -512, 512);
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<ParamSlot> host_slots(std::vector<HostSlot>& hs, bool adam) {
  std::vector<ParamSlot> s;
  for (HostSlot& h : hs) {
    ParamSlot p;
    p.n = int64_t(h.master.size());
    p.ema = h.ema.empty() ? nullptr : h.ema.data();
    p.master = h.master.data();
    if (h.averaged_only) {
      s.push_back(p);
      continue;
    }
    p.half = h.half;
    p.grad = h.half ? static_cast<void*>(h.gh.data()) : static_cast<void*>(h.gf.data());
    p.working = h.half ? h.wh.data() : nullptr;
    p.master = h.master.data();
    p.state1 = h.s1.data();
    p.state2 = adam ? h.s2.data() : nullptr;
    s.push_back(p);
  }
  return s;
}

// The same slots on the device.
struct DeviceSlots {
  std::vector<DeviceBuffer> bufs;
  std::vector<ParamSlot> slots;
  DeviceSlots(const std::vector<HostSlot>& hs, bool adam) {
    for (const HostSlot& h : hs) {
      ParamSlot p;
      p.n = int64_t(h.master.size());
      if (!h.ema.empty()) {
        bufs.push_back(upload(h.ema));
        p.ema = ptr<float>(bufs.back());
      }
      if (h.averaged_only) {
        bufs.push_back(upload(h.master));
        p.master = ptr<float>(bufs.back());
        slots.push_back(p);
        continue;
      }
      p.half = h.half;
      bufs.push_back(h.half ? upload(h.gh) : upload(h.gf));
      p.grad = bufs.back().data();
      if (h.half) {
        bufs.push_back(upload(h.wh));
        p.working = bufs.back().data();
      }
      bufs.push_back(upload(h.master));
      p.master = ptr<float>(bufs.back());
      bufs.push_back(upload(h.s1));
      p.state1 = ptr<float>(bufs.back());
      if (adam) {
        bufs.push_back(upload(h.s2));
        p.state2 = ptr<float>(bufs.back());
      }
      slots.push_back(p);
    }
  }
};

void require_same(const DeviceSlots& d, const std::vector<HostSlot>& want) {
  for (size_t i = 0; i < want.size(); i++) {
    INFO("slot " << i);
    const ParamSlot& p = d.slots[i];
    const size_t n = size_t(p.n);
    auto down = [&](const void* q, size_t bytes, void* to) { copy_sync(to, q, bytes); };
    std::vector<float> m(n), s1(n), s2(n), e(n);
    down(p.master, n * 4, m.data());
    require_same_bits(m, want[i].master, "master");
    if (p.ema) {
      down(p.ema, n * 4, e.data());
      require_same_bits(e, want[i].ema, "average");
    }
    if (!p.grad) continue;  // averaged-only
    down(p.state1, n * 4, s1.data());
    require_same_bits(s1, want[i].s1, "state1");
    if (p.state2) {
      down(p.state2, n * 4, s2.data());
      require_same_bits(s2, want[i].s2, "state2");
    }
    if (p.half) {
      std::vector<half_t> w(n), g(n);
      down(p.working, n * 2, w.data());
      down(p.grad, n * 2, g.data());
      require_same_bits(w, want[i].wh, "working");
      require_same_bits(g, want[i].gh, "gradient");
    } else {
      std::vector<float> g(n);
      down(p.grad, n * 4, g.data());
      require_same_bits(g, want[i].gf, "gradient");
    }
  }
}

}  // namespace

TEST_CASE("multi_tensor [gpu]: SGD, Nesterov and AdamW over every slot, the CPU's bits") {
  REQUIRE_GPU();
  Stream st;
  for (const char* kind : {"sgd", "nesterov", "adamw"})
    for (int32_t skip : {0, 1})
    for (double ema : {0.0, 0.999}) {
      INFO(kind << (skip ? ", skipped" : "") << (ema > 0 ? ", with averages" : ""));
      // With the step's finish folded in: every block reads inv_scale, skip, lr and t from the
      // very state that the last block's finish then changes (as the trainer runs it).
      const float inv_scale = 1.0f / 512;
      const double lr = 0.03;
      const int64_t t = 5;
      LossScalerConfig cfg;
      LossScalerState scaler;
      scaler.scale = 512;
      StepState state = step_state_make(scaler, t - 1);
      REQUIRE(state.inv_scale == inv_scale);
      REQUIRE(state.t == t);
      state.skip = skip;
      state.lr = lr;
      DeviceBuffer d_state = upload(std::vector<StepState>{state});
      StepState* d = static_cast<StepState*>(d_state.data());
      const StepFinish finish{cfg, d};
      const bool adam = std::string(kind) == "adamw";
      std::vector<HostSlot> want = make_host(3);
      if (ema > 0) add_averages(want, 3);
      DeviceSlots dev(want, adam);
      ParamTable table;
      table.build(dev.slots, current_device(), st.get());
      REQUIRE(table.chunk_count() == int(param_chunks(dev.slots).size()));
      REQUIRE(table.param_count() == int(kSizes.size()));
      REQUIRE(table.chunk_count() > 1);  // several blocks read the state before the finish
      SgdParams sp;
      sp.lr = lr, sp.momentum = 0.9, sp.weight_decay = 5e-4, sp.nesterov = kind[0] == 'n';
      AdamWParams ap;
      ap.lr = lr, ap.weight_decay = 0.05;
      if (adam)
        multi_adamw_step_gpu(table, &d->inv_scale, &d->skip, &d->lr, ap, &d->t, ema, &finish,
                             st.get());
      else
        multi_sgd_step_gpu(table, &d->inv_scale, &d->skip, &d->lr, sp, &d->t, ema, &finish,
                           st.get());
      st.synchronize();
      const std::vector<ParamSlot> hs = host_slots(want, adam);
      if (adam) multi_adamw_step_cpu(hs, inv_scale, skip, ap, t, ema);
      else multi_sgd_step_cpu(hs, inv_scale, skip, sp, t, ema);
      require_same(dev, want);
      step_finish_cpu(cfg, &state);
      require_same_state(download<StepState>(d_state, 1)[0], state);
    }
}

TEST_CASE("multi_tensor [gpu]: the folded finish alone, over a table of no elements; twice") {
  // A table with nothing to update (one empty tensor) launches the folded kernel alone; a
  // second launch on the stream finds its arrival counter back at 0 (the step's finish runs
  // exactly once per launch).
  REQUIRE_GPU();
  Stream st;
  DeviceBuffer somewhere = upload(std::vector<float>{0});
  ParamSlot empty;
  empty.grad = empty.master = empty.state1 = static_cast<float*>(somewhere.data());
  ParamTable table;
  table.build({empty}, current_device(), st.get());
  REQUIRE(table.chunk_count() == 0);
  LossScalerConfig cfg;
  StepState state = step_state_make(LossScalerState{}, 0);
  DeviceBuffer d_state = upload(std::vector<StepState>{state});
  StepState* d = static_cast<StepState*>(d_state.data());
  const StepFinish finish{cfg, d};
  multi_sgd_step_gpu(table, &d->inv_scale, &d->skip, &d->lr, SgdParams{}, &d->t, 0, &finish,
                     st.get());
  multi_adamw_step_gpu(table, &d->inv_scale, &d->skip, &d->lr, AdamWParams{}, &d->t, 0, &finish,
                       st.get());
  st.synchronize();
  step_finish_cpu(cfg, &state);
  step_finish_cpu(cfg, &state);
  REQUIRE(state.steps_taken == 2);
  require_same_state(download<StepState>(d_state, 1)[0], state);
}

TEST_CASE("multi_tensor [gpu]: the check raises exactly the poisoned slots' flags") {
  REQUIRE_GPU();
  Stream st;
  std::vector<HostSlot> h = make_host(9);  // slots 1 and 4 are float, the others half
  h[3].gh[9215] = half_t(INFINITY);                // a half slot's last element
  h[4].gf[size_t(kParamChunk)] = NAN;              // a float slot's second chunk
  h[1].gf[0] = 3e38f;                              // finite; overflows once multiplied by 1024
  // averaged-only slots after them (no gradient): the check's launch covers the parameters'
  // chunks only, so it never reads their null gradients, nor raises a flag past the last one
  add_averages(h, 9);
  DeviceSlots dev(h, false);
  ParamTable table;
  table.build(dev.slots, current_device(), st.get());
  REQUIRE(table.param_count() == int(kSizes.size()));
  REQUIRE(table.param_chunk_count() < table.chunk_count());
  for (float inv_scale : {1.0f / 512, 1024.0f}) {
    INFO("inv_scale " << inv_scale);
    DeviceBuffer d_s = upload(std::vector<float>{inv_scale});
    DeviceBuffer flags = upload(std::vector<int32_t>(kSizes.size(), 0));
    multi_grads_nonfinite_gpu(table, ptr<float>(d_s), ptr<int32_t>(flags), nullptr, st.get());
    st.synchronize();
    std::vector<int32_t> want(kSizes.size(), 0);
    multi_grads_nonfinite_cpu(host_slots(h, false), inv_scale, want.data());
    REQUIRE(download<int32_t>(flags, kSizes.size()) == want);
    REQUIRE(want == std::vector<int32_t>{0, inv_scale > 1, 0, 1, 1, 0, 0});

    // The decision folded in: the last block reads every block's flags (written in the same
    // launch) and decides as step_decide_cpu does over the CPU's flags.
    StepState state = step_state_make(LossScalerState{}, 7);
    DeviceBuffer d_state = upload(std::vector<StepState>{state});
    DeviceBuffer flags2 = upload(std::vector<int32_t>(kSizes.size(), 0));
    multi_grads_nonfinite_gpu(table, ptr<float>(d_s), ptr<int32_t>(flags2),
                              static_cast<StepState*>(d_state.data()), st.get());
    st.synchronize();
    REQUIRE(download<int32_t>(flags2, kSizes.size()) == want);
    step_decide_cpu(int(want.size()), want.data(), &state);
    REQUIRE(state.first_bad == (inv_scale > 1 ? 1 : 3));
    require_same_state(download<StepState>(d_state, 1)[0], state);
  }
}
