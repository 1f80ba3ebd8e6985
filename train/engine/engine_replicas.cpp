// Engine: its replicas as a group: building them (each a lane on its device, the model from the
// seed, its optimizer, step state and buckets) and the collective between them; describing
// them and their links; finding where their weights differ. train/engine/replica.h has the
// pieces of one replica.
#include <cstdio>
#include <exception>
#include <sstream>
#include <vector>

#include "kernels/check.h"
#include "kernels/xxhash64.h"
#include "nn/model_spec.h"
#include "train/engine/engine.h"
#include "train/engine/engine_graph.h"
#include "train/engine/replica.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/mpi.h"
#include "train/replicas/mpi_gpu.h"
#include "train/replicas/peer_access.h"

namespace cutrain {

// Buckets smaller than this take the next layer in too (train/replicas/grad_buckets.h). A collective
// costs a few thread hand-offs (tens of microseconds on a CPU, ~10 us of launches and events
// on a GPU), so a bucket should carry at least a few hundred KiB for the copies to dominate.
constexpr size_t kBucketMinBytes = size_t(256) << 10;

LossScalerConfig loss_scaler_config(DType dtype, int max_skips) {
  LossScalerConfig c;  // 2^16, x2 after 2000 clean steps, x0.5 on overflow, [1, 2^24]
  c.max_consecutive_skips = max_skips;
  if (dtype != DType::f16) {
    c.dynamic = false;  // fp32 gradients do not underflow: no scaling
    c.init = 1;
    // ... and an inf/NaN gradient is no scale too large, so no later step can do better:
    // the run stops at the first (--max-skips is fp16's).
    c.max_consecutive_skips = 1;
  }
  return c;
}

Engine::Engine(const TrainConfig& cfg, const RunDevice& device, const ClassBalance& balance,
               LaunchPlan* plan)
    : cfg_(cfg),
      device_(device),
      compute_threads_(run_compute_threads(cfg_, device_)),
      compute_scope_(compute_threads_),
      plan_(plan) {
  const int R = replica_count(cfg_);  // in this process
  // Under mpirun each process is one replica of size() (train/replicas/mpi.h), rank rank(); on
  // a GPU, that of its local rank (choose_run_device in train/run/run_setup.cpp).
  const Mpi* mpi = device_.mpi;
  if (mpi) {
    USER_CHECK(R == 1, "--devices " << cfg_.devices << " under mpirun: each process is one "
                                    << "replica; launch more processes instead (mpirun -np N)");
    USER_CHECK(cfg_.batch % (int64_t(mpi->size()) * cfg_.accum) == 0,
               "--batch " << cfg_.batch << " is not divisible by the " << mpi->size()
                          << " processes of mpirun"
                          << (cfg_.accum > 1 ? " times --accum " + std::to_string(cfg_.accum) : "")
                          << ": the global batch is split evenly over the replicas");
  }
  world_ = mpi ? mpi->size() : R;
  const int first_rank = mpi ? mpi->rank() : 0;
  // Each replica's lane: on a GPU its compute stream and device (the model, the optimizer
  // state, the buckets and every kernel of the replica go there).
  std::vector<int> devices;
  if (device_.device == Device::cuda) {
    devices = gpu_ordinals(cfg_.devices);
    if (devices.empty()) devices.assign(size_t(R), device_.gpu);
    for (int d : devices)
      USER_CHECK(d < gpu_count(), (cfg_.devices.empty() ? "--device cuda" : "--devices " + cfg_.devices)
                                 << ": GPU " << d << " does not exist (" << gpu_count()
                                 << " usable)");
  }
  scaler_config_ = loss_scaler_config(device_.dtype, cfg_.max_skips);
  validate_loss_scaler_config(scaler_config_);

  ModelOptions mo;
  mo.H = mo.W = cfg_.size;
  mo.C = cfg_.channels;
  mo.classes = cfg_.classes;
  mo.dtype = device_.dtype;
  mo.seed = cfg_.seed;
  const ModelSpec spec = parse_model_spec(cfg_.model_text, cfg_.model);
  // Every replica builds the same model from the same seed: identical bits, no broadcast.
  for (int r = 0; r < R; r++) {
    auto rep = std::make_unique<Replica>();
    rep->rank = first_rank + r;
    const bool gpu = device_.device == Device::cuda || plan;  // (a plan notes a GPU's choices)
    rep->lane = std::make_unique<Lane>(device_.device, devices.empty() ? -1 : devices[size_t(r)],
                                       parse_conv_impl(cfg_.conv, gpu),
                                       parse_linear_impl(cfg_.linear, gpu), plan);
    const Context& ctx = rep->lane->context();
    const OnDevice on(ctx);
    mo.context = ctx;  // the model's tensors on the replica's device and stream
    rep->model = build_model(spec, mo);
    if (!cfg_.kernel_plan.empty()) rep->model->set_kernel_plan(parse_kernel_plan(cfg_.kernel_plan));
    rep->optimizer = make_optimizer(cfg_.optimizer, rep->model->parameters(), cfg_.lr,
                                    cfg_.momentum, cfg_.wd);
    // --ema: the parameters' average and BatchNorm's statistics'
    if (cfg_.ema > 0) rep->optimizer->enable_ema(cfg_.ema, rep->model->batchnorm_tensors());
    rep->lane->make_step(scaler_config_, int(rep->model->parameters().size()));
    rep->norm = InputNorm(Normalization{cfg_.mean, cfg_.std}, ctx);
    if (!balance.weights.empty())  // --balance loss: on the replica's device, once
      rep->class_weight = Tensor::from_doubles(balance.weights, {cfg_.classes},
                                               acc_dtype(device_.dtype))
                              .to(ctx);
    if (world_ > 1)
      rep->grads = std::make_unique<GradBuckets>(rep->model->parameters(), kBucketMinBytes);
    // More than one micro-batch a step: the forwards sum their batch statistics, and the
    // step's end makes the one update (update_batchnorm). Every layer's sums in one buffer.
    const auto& bns = rep->model->batchnorm_states();
    if ((world_ > 1 || cfg_.accum > 1) && !bns.empty()) {
      int64_t total = 0;
      for (const auto& [name, st] : bns) total += 2 * st->running_mean.numel();
      rep->bn_sums = Tensor::zeros({int(total)}, bns[0].second->running_mean.dtype(), ctx);
      int64_t offset = 0;
      for (const auto& [name, st] : bns) {
        const int n = 2 * int(st->running_mean.numel());
        st->step_sums = rep->bn_sums.flat_view(offset, {n});
        offset += n;
      }
    }
    replicas_.push_back(std::move(rep));
  }
  if (world_ > 1) {
    if (mpi && device_.device == Device::cuda) {  // NCCL, or the host-staged MPI ring
      const OnDevice on(replicas_[0]->lane->context());
      collective_ = make_mpi_gpu_collective(*mpi, devices[0], replicas_[0]->lane->stream());
    } else if (mpi) {
      collective_ = make_mpi_ring(*mpi);
    } else if (device_.device == Device::cuda) {
      std::vector<cudaStream_t> streams;
      for (auto& rep : replicas_) streams.push_back(rep->lane->stream());
      collective_ = make_gpu_ring(devices, streams);
    } else {
      collective_ = make_cpu_ring(R);
    }
    marked_.assign(replicas_[0]->grads->size(), 0);
    collective_->set_timeout(cfg_.collective_timeout);
    // --sync-bn's sums go through the gradients' collective. In backward they queue behind
    // the buckets' all-reduces already started, so a layer may wait for those too; a second
    // collective of their own (own comm streams) measured slower on one GPU, 2.01x the step
    // against 1.37x (bench/results/sync-bn-2026-11-26.md), for reasons not yet profiled.
    if (cfg_.sync_bn && !replicas_[0]->model->batchnorm_states().empty()) start_sync_bn();
  }
  if (cfg_.cuda_graph && device_.device == Device::cuda && world_ == 1)
    graphs_ = std::make_unique<Graphs>();
}

Engine::~Engine() {
  // The graphs first (their private pools back to the allocator), then the collective (its
  // comm streams read the gradient buffers), then each replica's lane waits for its queue
  // before the loaders and tensors go away.
  graphs_.reset();
  try {
    // Unwinding a failure: collectives queued on other processes' behalf may never complete.
    if (collective_ && std::uncaught_exceptions() > 0) collective_->abort();
    for (auto& rep : replicas_) rep->lane->synchronize();
    collective_.reset();
  } catch (...) {  // never throw from here (an earlier CUDA error may be unwinding the stack)
  }
}

void Engine::abort_collective() {
  if (!device_.mpi || !collective_) return;
  broken_ = true;
  collective_->abort();
}

std::string Engine::description() const {
  const int R = world_;
  if (R == 1) return "";
  std::ostringstream os;
  if (device_.mpi)
    os << R << " replicas (mpirun: one per process)";
  else
    os << R << " replicas (--devices " << cfg_.devices << ")";
  os << ", " << cfg_.batch / R << " images each of every batch of " << cfg_.batch
     << ", ring all-reduce of " << replicas_[0]->grads->describe();
  if (device_.device == Device::cuda || device_.mpi) os << "; " << collective_->describe();
  if (sync_bn_) os << "; BatchNorm synchronised over the replicas (--sync-bn)";
  return os.str();
}

std::string Engine::peer_report() const {
  DeviceRing* ring = collective_ ? device_ring(*collective_) : nullptr;
  if (!ring) return "";
  PeerMatrix m = ring->peers();
  // ~2 ms a pair over PCIe; its buffers go back to cudaFree with its streams.
  measure_copy_bandwidth(m, size_t(16) << 20, 5);
  return format_peer_matrix(m);
}

std::string Engine::replicas_difference() {
  std::vector<Replica*> all;
  for (auto& rep : replicas_) all.push_back(rep.get());
  if (!device_.mpi) return replica_difference(all);
  // The copies below wait for the steps in flight, which on GPUs may stand behind an
  // all-reduce with a rank that stopped: those are waited for first, with the deadline.
  if (!launched_.empty()) await_records(launched_.back());
  // Under mpirun each process holds one replica: the xxh64 of each of its tensors, gathered,
  // against rank 0's.
  const Mpi& mpi = *device_.mpi;
  std::vector<std::string> names;
  std::vector<uint64_t> mine;
  for (const auto& [name, t] : replica_tensors(*all[0])) {
    const Tensor h = t->to(Context::cpu());
    names.push_back(name);
    mine.push_back(xxh64(h.raw(), h.bytes()));
  }
  std::vector<uint64_t> every(mine.size() * size_t(mpi.size()));
  mpi.all_gather(mine.data(), mine.size() * sizeof(uint64_t), every.data());
  for (int r = 1; r < mpi.size(); r++)
    for (size_t i = 0; i < mine.size(); i++) {
      const uint64_t ha = every[i], hb = every[size_t(r) * mine.size() + i];
      if (ha == hb) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, " (xxh64 %016llx against %016llx)", (unsigned long long)hb,
                    (unsigned long long)ha);
      return "replica " + std::to_string(r) + " differs from replica 0 in '" + names[i] + "'" +
             buf;
    }
  return "";
}

}  // namespace cutrain
