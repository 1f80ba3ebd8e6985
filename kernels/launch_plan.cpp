// LaunchPlan and the known GPUs' rooflines (launch_plan.h).
#include "kernels/launch_plan.h"

#include <algorithm>

#include "kernels/check.h"

namespace cutrain {

const std::vector<Roofline>& known_gpus() {
  // NVIDIA's data sheets, dense (no 2:4 sparsity), SXM boards where there are two.
  static const std::vector<Roofline> gpus = {
      {"h100", "NVIDIA H100 SXM5 80GB", 989.4e12, 66.9e12, 3.35e12},
      {"h200", "NVIDIA H200 SXM 141GB", 989.4e12, 66.9e12, 4.8e12},
      {"a100", "NVIDIA A100 SXM4 80GB", 312e12, 19.5e12, 2.039e12},
      {"l4", "NVIDIA L4", 121e12, 30.3e12, 0.3e12},
  };
  return gpus;
}

const Roofline& roofline_of(const std::string& name) {
  std::string names;
  for (const Roofline& g : known_gpus()) {
    if (name == g.name) return g;
    names += (names.empty() ? "" : ", ") + std::string(g.name);
  }
  USER_CHECK(false, "--gpu " << name << ": not a GPU whose peaks cutrain knows (" << names
                             << "); kernels/launch_plan.cpp has the table");
  return known_gpus()[0];  // not reached
}

double ideal_seconds(const LaunchCost& c, const Roofline& gpu) {
  const double peak = c.tensor ? gpu.tensor_fp16 : gpu.fp32;
  return std::max(c.bytes / gpu.bandwidth, c.flops / peak);
}

void LaunchPlan::note(const LaunchCost& c) {
  if (!recording_ || c.launches <= 0) return;
  rows_.push_back(Row{phase_, c});
  if (timing_ && !c.other_stream) {
    marks_.emplace_back(rows_.size() - 1, Event(true));
    marks_.back().second.record(stream_);
  }
}

void LaunchPlan::time_on(cudaStream_t stream) {
  timing_ = true;
  stream_ = stream;
  marks_.clear();
}

void LaunchPlan::finish_timing() {
  if (!timing_) return;
  Event end(true);
  end.record(stream_);
  end.synchronize();
  for (size_t i = 0; i < marks_.size(); i++) {
    const Event& next = i + 1 < marks_.size() ? marks_[i + 1].second : end;
    rows_[marks_[i].first].measured_s = 1e-3 * double(next.ms_since(marks_[i].second));
  }
  marks_.clear();
  timing_ = false;
}

int LaunchPlan::launches() const {
  int n = 0;
  for (const Row& r : rows_) n += r.cost.launches;
  return n;
}

int LaunchPlan::launches(const std::string& phase) const {
  int n = 0;
  for (const Row& r : rows_)
    if (r.phase == phase) n += r.cost.launches;
  return n;
}

LaunchCost memset_cost(size_t bytes) { return {"memset", 1, double(bytes), 0}; }

LaunchCost copy_cost(const char* what, size_t bytes, bool on_device) {
  return {what, 1, (on_device ? 2.0 : 1.0) * double(bytes), 0};
}

}  // namespace cutrain
