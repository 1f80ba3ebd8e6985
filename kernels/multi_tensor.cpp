// The parameter table and the CPU references of the multi-tensor optimizer steps
// (multi_tensor.h). The GPU kernels are in multi_tensor.cu.
#include "kernels/multi_tensor.h"

#include <algorithm>
#include <cstring>

#include "kernels/check.h"

namespace cutrain {

bool operator==(const ParamSlot& a, const ParamSlot& b) {
  return a.grad == b.grad && a.master == b.master && a.state1 == b.state1 &&
         a.state2 == b.state2 && a.working == b.working && a.ema == b.ema && a.n == b.n &&
         a.half == b.half;
}

std::vector<ParamChunk> param_chunks(const std::vector<ParamSlot>& slots) {
  std::vector<ParamChunk> chunks;
  for (size_t i = 0; i < slots.size(); i++)
    for (int64_t b = 0; b < slots[i].n; b += kParamChunk)
      chunks.push_back(ParamChunk{int32_t(i), b, std::min(slots[i].n, b + kParamChunk)});
  return chunks;
}

namespace {
// The table's layout in its buffer: the slots, then the chunks at the next 16 bytes.
size_t chunks_offset(size_t slots) {
  return (slots * sizeof(ParamSlot) + 15) / 16 * 16;
}
}  // namespace

void ParamTable::build(const std::vector<ParamSlot>& slots, int device, cudaStream_t stream) {
  CHECK(!slots.empty(), "ParamTable: no parameters");
  int params = 0;
  bool averages = false;
  for (const ParamSlot& s : slots) {
    averages = averages || s.ema;
    if (!s.grad) {  // averaged-only
      CHECK(s.n >= 0 && s.master && s.ema && !s.state1 && !s.state2 && !s.working,
            "ParamTable: an averaged-only slot (no gradient) needs its tensor and its average, "
            "and nothing else");
      continue;
    }
    CHECK(params == &s - slots.data(),
          "ParamTable: a parameter's slot after an averaged-only one: parameters come first");
    CHECK(s.n >= 0 && s.master && s.state1,
          "ParamTable: a slot without its master weights or optimizer state");
    params++;
  }
  const std::vector<ParamChunk> chunks = param_chunks(slots);
  int param_chunks = 0;
  while (param_chunks < int(chunks.size()) && chunks[size_t(param_chunks)].slot < params)
    param_chunks++;
  const size_t at = chunks_offset(slots.size());
  std::vector<char> bytes(at + chunks.size() * sizeof(ParamChunk), 0);
  std::memcpy(bytes.data(), slots.data(), slots.size() * sizeof(ParamSlot));
  if (!chunks.empty()) std::memcpy(bytes.data() + at, chunks.data(), chunks.size() * sizeof(ParamChunk));
  mem_ = DeviceBuffer(bytes.size(), device, stream);
  // From a local: wait for the copy (the build is rare: the first step, or a tensor that moved).
  copy_async(mem_.data(), bytes.data(), bytes.size(), stream);
  Event done;
  done.record(stream);
  done.synchronize();
  host_ = slots;
  chunks_ = int(chunks.size());
  params_ = params;
  param_chunks_ = param_chunks;
  averages_ = averages;
}

const ParamChunk* ParamTable::chunks() const {
  return reinterpret_cast<const ParamChunk*>(static_cast<const char*>(mem_.data()) +
                                             chunks_offset(host_.size()));
}

ParamTotals param_totals(const std::vector<ParamSlot>& slots) {
  ParamTotals t;
  for (const ParamSlot& s : slots) {
    if (s.ema) {
      t.ema_elements += s.n;
      t.ema_bytes += (s.grad ? 8.0 : 12.0) * double(s.n);
    }
    if (!s.grad) continue;  // averaged-only
    const double elem = s.half ? 2.0 : 4.0;
    t.elements += s.n;
    t.grad_bytes += elem * double(s.n);
    if (s.working) t.working_bytes += elem * double(s.n);
  }
  return t;
}

// --- CPU references ---

namespace {
// f(T) with T the slot's storage type.
template <typename F> void on_slot(const ParamSlot& s, F&& f) {
  if (s.half) f(half_t{});
  else f(float{});
}
}  // namespace

void multi_grads_nonfinite_cpu(const std::vector<ParamSlot>& slots, double inv_scale,
                               int32_t* flags) {
  for (size_t i = 0; i < slots.size(); i++)
    if (slots[i].grad) on_slot(slots[i], [&](auto tag) {
      using T = decltype(tag);
      if (!grads_finite_cpu<T>(slots[i].n, static_cast<const T*>(slots[i].grad), inv_scale))
        flags[i] = 1;
    });
}

namespace {
// The averages of every slot that has one, on a step taken (multi_tensor.h).
void average_slots(const std::vector<ParamSlot>& slots, bool skip, double ema_decay, int64_t t) {
  if (skip) return;
  for (const ParamSlot& s : slots)
    if (s.ema) {
      CHECK(ema_decay > 0, "multi-tensor step: a slot has an average but the decay is 0");
      ema_update_cpu<float>(s.n, s.master, s.ema, ema_decay, t);
    }
}
}  // namespace

void multi_sgd_step_cpu(const std::vector<ParamSlot>& slots, double inv_scale, bool skip,
                        const SgdParams& p, int64_t t, double ema_decay) {
  for (const ParamSlot& s : slots)
    if (s.grad) on_slot(s, [&](auto tag) {
      using T = decltype(tag);
      T* g = static_cast<T*>(s.grad);
      if (!skip)
        sgd_step_cpu<T>(s.n, g, inv_scale, s.master, s.state1, static_cast<T*>(s.working), p);
      std::memset(static_cast<void*>(g), 0, size_t(s.n) * sizeof(T));
    });
  average_slots(slots, skip, ema_decay, t);
}

void multi_adamw_step_cpu(const std::vector<ParamSlot>& slots, double inv_scale, bool skip,
                          const AdamWParams& p, int64_t t, double ema_decay) {
  for (const ParamSlot& s : slots)
    if (s.grad) on_slot(s, [&](auto tag) {
      using T = decltype(tag);
      T* g = static_cast<T*>(s.grad);
      if (!skip)
        adamw_step_cpu<T>(s.n, g, inv_scale, s.master, s.state1, s.state2,
                          static_cast<T*>(s.working), p, t);
      std::memset(static_cast<void*>(g), 0, size_t(s.n) * sizeof(T));
    });
  average_slots(slots, skip, ema_decay, t);
}

}  // namespace cutrain
