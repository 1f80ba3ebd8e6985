// Engine: the launched steps' results, read back from their lanes' records without waiting
// (train/engine/engine.h, collect): every replica's part in rank order, under mpirun gathered
// from every process, the skip decision checked alike everywhere, and the loss scaler's abort.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "kernels/check.h"
#include "train/engine/engine.h"
#include "train/replicas/deadline.h"
#include "train/replicas/mpi.h"

namespace cutrain {

void Engine::collect(size_t wait_for, std::deque<StepResult>& done) {
  // How many to take: at least wait_for, and every step after those whose records have
  // arrived. Under mpirun every rank takes the same number (the fewest any rank could): each
  // result is gathered from all ranks (result_of), and a GPU's records arrive when they do.
  size_t take = std::min(wait_for, launched_.size());
  while (take < launched_.size()) {
    bool arrived = true;
    for (auto& rep : replicas_) arrived = arrived && rep->lane->arrived(launched_[take].slot);
    if (!arrived) break;
    take++;
  }
  if (device_.mpi) take = size_t(-device_.mpi->max(-int64_t(take)));
  for (size_t taken = 0; taken < take; taken++) {
    const Launched l = launched_.front();
    launched_.pop_front();
    try {
      done.push_back(result_of(l));
    } catch (...) {
      broken_ = true;  // the loss scaler gave up: the run stops here
      throw;
    }
  }
  if (collective_) collective_->collect_trace(wait_for == SIZE_MAX);
  for (auto& rep : replicas_) {
    GpuTimeline* t = rep->lane->timeline.get();
    if (!t) continue;
    if (wait_for == SIZE_MAX)
      t->flush();  // everything queued has run: the row is complete
    else
      t->collect();
  }
}

// One replica's part of a step's result: its record, its communication times, its device's
// clock, and its process's loader-alone time.
struct Engine::Shard {
  StepRecord rec;
  double comm_s = 0, comm_exposed_s = 0;
  DeviceTime device;
  double loader_s = 0;
};

void Engine::await_records(const Launched& l) {
  const double timeout = cfg_.collective_timeout;
  if (!device_.mpi || !collective_ || device_.device != Device::cuda) return;  // nothing to watch
  Deadline deadline(timeout);
  for (auto& rep : replicas_) {
    while (!rep->lane->arrived(l.slot)) {
      const std::string error = collective_->async_error();
      if (error.empty() && !deadline.passed()) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      broken_ = true;
      collective_->abort();  // the queue would otherwise wait for ever for the other ranks
      USER_CHECK(error.empty(), "step " << l.result.step + 1 << ": the collective between the "
                                        << "processes failed: " << error);
      USER_CHECK(false, "collective timeout: rank " << device_.mpi->rank() << "'s step "
                            << l.result.step + 1 << " did not finish within " << timeout
                            << " s: its collective (" << collective_->describe()
                            << ") waits for another rank, stopped or stuck (--collective-timeout "
                            << timeout << ")");
    }
  }
}

StepResult Engine::result_of(const Launched& l) {
  const int R = world_;
  StepResult r = l.result;
  await_records(l);
  // Every replica's part, in rank order: this process's replicas, and under mpirun every
  // process's (one replica each, gathered: every rank computes the same result).
  std::vector<Shard> shards;
  for (auto& rep : replicas_) {
    Lane& lane = *rep->lane;
    Shard s;
    s.rec = lane.host(l.slot);  // (its arrival means every mark of the step has been passed)
    if (R > 1) {
      s.comm_s = lane.seconds(Lane::first_ready, Lane::reduced, l.slot);
      s.comm_exposed_s = lane.seconds(Lane::backward_done, Lane::reduced, l.slot);
    }
    if (l.prev_slot >= 0)
      s.device.idle_s = std::max(0.0, lane.seconds(Lane::step_end, l.prev_slot,
                                                   Lane::step_begin, l.slot));
    s.device.wait_s = lane.seconds(Lane::step_begin, Lane::batch_ready, l.slot);
    s.device.compute_s = lane.seconds(Lane::batch_ready, Lane::step_end, l.slot);
    s.loader_s = l.result.loader_s;
    shards.push_back(s);
  }
  if (device_.mpi) {
    std::vector<Shard> all(static_cast<size_t>(R));
    device_.mpi->all_gather(shards.data(), sizeof(Shard), all.data());
    shards = all;
  }
  std::vector<const StepRecord*> recs;
  for (const Shard& s : shards) recs.push_back(&s.rec);
  for (int i = 0; i < R; i++) {  // rank order: the same sums every run
    r.loss += recs[size_t(i)]->loss;
    r.correct += recs[size_t(i)]->correct;
  }
  if (R > 1)  // means over the replicas
    for (const Shard& s : shards) {
      r.comm_s += s.comm_s / R;
      r.comm_exposed_s += s.comm_exposed_s / R;
    }
  const double launch_s = r.device.launch_s;  // this process's host (Engine::launch_step)
  r.device = DeviceTime();
  r.device.launch_s = launch_s;
  for (const Shard& s : shards) {  // means over the replicas; the slowest loader
    r.device.idle_s += s.device.idle_s / R;
    r.device.wait_s += s.device.wait_s / R;
    r.device.compute_s += s.device.compute_s / R;
    r.loader_s = std::max(r.loader_s, s.loader_s);
  }
  const StepState& state = recs[0]->state;
  r.scale_after = state.scaler.scale;
  if (!l.stepped) {  // no images: nothing was decided, the scale stays
    r.loss_scale = state.scaler.scale;
    return r;
  }
  // Every replica took the same decision from the same flags and the same state.
  for (int i = 1; i < R; i++) {
    const StepState& o = recs[size_t(i)]->state;
    CHECK(o.skip == state.skip && o.first_bad == state.first_bad &&
              o.steps_taken == state.steps_taken && o.scaler.scale == state.scaler.scale &&
              o.scaler.clean_steps == state.scaler.clean_steps,
          "step " << r.step << ": replica " << i << "'s step state (skip " << o.skip
                  << ", scale " << o.scaler.scale << ") differs from replica 0's (skip "
                  << state.skip << ", scale " << state.scaler.scale << "): a bug in cutrain");
  }
  r.loss_scale = state.scale_used;
  r.taken = state.skip == 0;
  if (!r.taken) {
    // The first parameter at fault; with replicas, the replica too when it alone overflowed.
    auto name = [&](int bad) {
      return bad >= 0 ? optimizer().parameter_name(size_t(bad))
                      : std::string("(unknown parameter)");
    };
    if (R == 1) {
      r.overflow = name(state.first_bad);
    } else {
      std::vector<char> overflowed(size_t(R), 0);
      for (int i = 0; i < R; i++) overflowed[size_t(i)] = recs[size_t(i)]->own.skip != 0;
      r.overflow = overflow_name(overflowed, [&](int i) {
        return name(recs[size_t(i)]->own.first_bad);
      });
      if (r.overflow.empty()) r.overflow = name(state.first_bad);  // not reached: the OR
    }
  }
  try {
    // Too many overflows in a row (fp32: the first) stop the run, naming the step.
    loss_scaler_check(scaler_config_, state.scaler, r.step, r.overflow);
  } catch (const UserError& e) {
    // Weights that are themselves inf/NaN (finite gradients times a huge rate made them so)
    // are the cause to name; replica 0's stand for all, which hold the same bits.
    const OnDevice on = on_device();
    for (const VarPtr& p : model().parameters())
      if (first_nonfinite(p->value) >= 0)
        throw UserError(std::string(e.what()) + ". The weights of " + p->name +
                        " are themselves inf/NaN: an update before step " +
                        std::to_string(r.step) + " made them so");
    throw;
  }
  return r;
}

StepState Engine::step_state(int r) const {
  const OnDevice on = on_replica(r);
  return replicas_.at(size_t(r))->lane->step().read();
}

}  // namespace cutrain
