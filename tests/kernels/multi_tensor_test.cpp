// The parameter table of the multi-tensor optimizer steps (kernels/multi_tensor.h) on the CPU:
// its chunks cover every element of every slot once, in order; its sizes for the launch
// costs; and the CPU references: a flag for each slot that holds an inf or NaN, the update of
// sgd_step_cpu / adamw_step_cpu on every slot, and every gradient zeroed, skipped or not.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/multi_tensor.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

// One parameter's host memory.
struct Owned {
  std::vector<half_t> gh, wh;  // half slots: the gradient and the working copy
  std::vector<float> gf;       // float slots: the gradient
  std::vector<float> master, s1, s2;
};

std::vector<ParamSlot> make_slots(std::vector<Owned>& own, const std::vector<int64_t>& sizes,
                                  bool adam, uint64_t seed) {
  own.assign(sizes.size(), Owned{});
  std::vector<ParamSlot> slots;
  for (size_t i = 0; i < sizes.size(); i++) {
    Owned& o = own[i];
    const int64_t n = sizes[i];
    const bool half = i % 2 == 0;
    ParamSlot s;
    s.n = n, s.half = half;
    for (int64_t j = 0; j < n; j++) {
      const double u = 2 * rng_uniform(seed + i, uint64_t(j)) - 1;
      o.master.push_back(float(u));
      o.s1.push_back(float(0.1 * u));
      o.s2.push_back(float(0.01 * u * u));
      if (half) {
        o.gh.push_back(half_t(float(512 * u)));
        o.wh.push_back(half_t(float(u)));
      } else {
        o.gf.push_back(float(512 * u));
      }
    }
    s.grad = half ? static_cast<void*>(o.gh.data()) : static_cast<void*>(o.gf.data());
    s.working = half ? o.wh.data() : nullptr;
    s.master = o.master.data();
    s.state1 = o.s1.data();
    s.state2 = adam ? o.s2.data() : nullptr;
    slots.push_back(s);
  }
  return slots;
}

bool grads_zero(const std::vector<Owned>& own) {
  for (const Owned& o : own) {
    for (half_t h : o.gh)
      if (h.bits != 0) return false;
    for (float f : o.gf)
      if (f != 0.0f || std::signbit(f)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("multi_tensor: the chunks cover every element of every slot once, in order") {
  std::vector<ParamSlot> slots(5);
  const int64_t sizes[] = {0, 1, kParamChunk, kParamChunk + 1, 3 * kParamChunk - 7};
  for (int i = 0; i < 5; i++) slots[size_t(i)].n = sizes[i];
  const std::vector<ParamChunk> chunks = param_chunks(slots);
  REQUIRE(chunks.size() == 0 + 1 + 1 + 2 + 3);
  int32_t slot = -1;
  int64_t next = 0;
  for (const ParamChunk& c : chunks) {
    if (c.slot != slot) {  // a new slot starts at 0, and the one before ended at its size
      REQUIRE(c.slot > slot);
      if (slot >= 0) REQUIRE(next == sizes[slot]);
      slot = c.slot, next = 0;
    }
    REQUIRE(c.begin == next);
    REQUIRE(c.end > c.begin);
    REQUIRE(c.end - c.begin <= kParamChunk);
    next = c.end;
  }
  REQUIRE(next == sizes[4]);
}

TEST_CASE("multi_tensor: the totals the launch costs count from") {
  std::vector<Owned> own;
  const std::vector<ParamSlot> slots = make_slots(own, {10, 7, 3}, false, 1);  // half, float, half
  const ParamTotals t = param_totals(slots);
  REQUIRE(t.elements == 20);
  REQUIRE(t.grad_bytes == 2 * 10 + 4 * 7 + 2 * 3);
  REQUIRE(t.working_bytes == 2 * 10 + 2 * 3);
  const LaunchCost sgd = multi_step_gpu_cost("multi_sgd_step", t, 1, 7, false);
  REQUIRE(sgd.launches == 1);
  // gradient read and zeroed, master and velocity read and written, the working copy written
  REQUIRE(sgd.bytes == 2 * t.grad_bytes + 2 * 4.0 * 20 * 2 + t.working_bytes);
  REQUIRE(multi_step_gpu_cost("x", ParamTotals{}, 2, 15, false).launches == 0);
  REQUIRE(multi_grads_nonfinite_gpu_cost(t, false).launches == 1);
  // With a step's work folded in (decide, finish), nothing to update still launches it.
  REQUIRE(multi_step_gpu_cost("x", ParamTotals{}, 2, 15, true).launches == 1);
  REQUIRE(multi_grads_nonfinite_gpu_cost(ParamTotals{}, true).launches == 1);
  REQUIRE(multi_grads_nonfinite_gpu_cost(ParamTotals{}, false).launches == 0);
}

TEST_CASE("multi_tensor: the CPU references flag each bad slot, update every slot, zero every "
          "gradient") {
  const std::vector<int64_t> sizes = {300, 17, kParamChunk + 5, 1};
  for (bool adam : {false, true})
    for (bool skip : {false, true}) {
      INFO((adam ? "adamw" : "sgd") << (skip ? ", skipped" : ""));
      std::vector<Owned> a, b;
      const std::vector<ParamSlot> sa = make_slots(a, sizes, adam, 7);
      const std::vector<ParamSlot> sb = make_slots(b, sizes, adam, 7);
      // the check: slot 1 (float) and slot 2 (half) poisoned
      b[1].gf[3] = INFINITY;
      b[2].gh[kParamChunk + 2] = half_t(NAN);
      std::vector<int32_t> flags(sizes.size(), 0);
      multi_grads_nonfinite_cpu(sb, 1.0 / 512, flags.data());
      REQUIRE(flags == std::vector<int32_t>{0, 1, 1, 0});
      // the update against the per-tensor references, slot by slot
      SgdParams sp;
      sp.momentum = 0.9, sp.weight_decay = 1e-3, sp.lr = 0.05;
      AdamWParams ap;
      ap.lr = 1e-3;
      if (adam) multi_adamw_step_cpu(sa, 1.0 / 512, skip, ap, 3);
      else multi_sgd_step_cpu(sa, 1.0 / 512, skip, sp);
      std::vector<Owned> want;
      const std::vector<ParamSlot> sw = make_slots(want, sizes, adam, 7);
      for (size_t i = 0; i < sizes.size() && !skip; i++) {
        const ParamSlot& s = sw[i];
        if (s.half) {
          const half_t* g = static_cast<const half_t*>(s.grad);
          if (adam) adamw_step_cpu<half_t>(s.n, g, 1.0 / 512, s.master, s.state1, s.state2,
                                           static_cast<half_t*>(s.working), ap, 3);
          else sgd_step_cpu<half_t>(s.n, g, 1.0 / 512, s.master, s.state1,
                                    static_cast<half_t*>(s.working), sp);
        } else {
          const float* g = static_cast<const float*>(s.grad);
          if (adam) adamw_step_cpu<float>(s.n, g, 1.0 / 512, s.master, s.state1, s.state2,
                                          nullptr, ap, 3);
          else sgd_step_cpu<float>(s.n, g, 1.0 / 512, s.master, s.state1, nullptr, sp);
        }
      }
      for (size_t i = 0; i < sizes.size(); i++) {
        INFO("slot " << i);
        REQUIRE(a[i].master == want[i].master);  // untouched when skipped
        REQUIRE(a[i].s1 == want[i].s1);
        REQUIRE(a[i].s2 == want[i].s2);
        REQUIRE(std::memcmp(a[i].wh.data(), want[i].wh.data(), a[i].wh.size() * 2) == 0);
      }
      std::vector<Owned> start;
      make_slots(start, sizes, adam, 7);
      REQUIRE((a[0].master != start[0].master) == !skip);  // a step taken moved the weights
      REQUIRE(grads_zero(a));
    }
}
