// defines: Collective, what data-parallel replicas do together (average gradient buckets and
// BatchNorm step sums, OR their overflow flags), and its implementations: the CPU ring
// (make_cpu_ring: train/replicas/ring.h's ring, a thread per replica) and the GPU ring (make_gpu_ring:
// train/replicas/device_ring.h, peer copies and a reduce kernel on a comm stream per replica). The
// trainer picks one at start and never asks which it has. Between processes (mpirun): the MPI
// ring (make_mpi_ring, one replica per process), and for GPUs NCCL or the host-staged MPI ring
// (make_mpi_gpu_collective, train/replicas/mpi_gpu.h), behind the same interface.
//
// One host thread drives every local replica, replica after replica (train/engine/engine.cpp;
// with --sync-bn a thread per replica, the calls under one lock: engine_sync.cpp): it marks the
// point in each replica's queue where a buffer is complete, then asks for the collective over
// it, then makes each replica's queue wait for the result:
//
//   for r: ... backward queues the last gradient of bucket k; mark(r, k)
//   all_reduce(k, {bucket k of each replica}, n, dtype, true)  // once every replica marked k
//   for r: wait(r)                                        // before the optimizer reads them
//
// The CPU's queues are complete when they are queued, so mark and wait do nothing and the
// collective runs at once; a GPU's comm streams wait for the marks (events) and the compute
// streams for the comm streams, and the host never waits. Both rings add the same chunks in
// the same order: the same bits (train/replicas/ring.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/trace.h"
#include "kernels/gpu.h"
#include "nn/tensor.h"

namespace cutrain {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int size() const = 0;  // replicas
  // Rank r's work queued so far completes what `tag` names (a bucket k = 0, 1, ...; the
  // flags; the statistics): the collective over `tag` starts after it. Call with rank r's
  // device current.
  virtual void mark(int rank, int tag) = 0;
  // Every rank's buffer data[r] of n elements (f32, f16 or f64, on its device) becomes the
  // average over the ranks (average = false: the sum), after every rank's mark `tag`. Both
  // add in the rings' order; the average multiplies by 1/R at the last addition.
  virtual void all_reduce(int tag, const std::vector<void*>& data, int64_t n, DType dtype,
                          bool average) = 0;
  // Every rank's n int32 flags become the OR of all ranks' (nonzero where any is), after every
  // rank's mark `tag`.
  virtual void any(int tag, const std::vector<int32_t*>& flags, int64_t n) = 0;
  // Rank r's queue waits for the collectives queued so far (no host block on a GPU).
  virtual void wait(int rank) = 0;
  // One line: "3 replicas on the CPU ring" / the GPU ring's links.
  virtual std::string describe() const = 0;
  // With --trace: rows for the communication (GPU comm streams); collect_trace(false) now and
  // then, collect_trace(true) when everything queued has run.
  virtual void trace(Tracer* tracer) { (void)tracer; }
  virtual void collect_trace(bool wait) { (void)wait; }
  // This process failed partway (an exception is unwinding): give up what is queued, so that
  // waiting for the streams cannot hang on ranks that will never join (NCCL). After it, no
  // other call.
  virtual void abort() {}
  // The collective timeout (--collective-timeout; 0: none): a rank that waits longer than
  // `seconds` for the others throws a UserError naming the step, the collective and whom it
  // waited for. Where the host waits: the CPU ring's threads; between processes the waits are
  // Mpi's (train/replicas/mpi.h), and a GPU's queue is watched by the engine (async_error).
  virtual void set_timeout(double seconds) { (void)seconds; }
  // The step being queued (0-based), for that message.
  virtual void at_step(int64_t step) { (void)step; }
  // An error the collective found on its own, after it was queued ("" when none): NCCL's
  // asynchronous one (a peer that left, a network failure). Polled while the host waits.
  virtual std::string async_error() { return ""; }
};

// R replicas on the CPU: each collective runs at once, the ring's R ranks on R threads.
std::unique_ptr<Collective> make_cpu_ring(int replicas);
// GPU replicas: rank r on devices[r], its compute stream streams[r].
class DeviceRing;
std::unique_ptr<Collective> make_gpu_ring(const std::vector<int>& devices,
                                          const std::vector<cudaStream_t>& streams);
// One replica per process of a run mpirun started (train/replicas/mpi.h): the CPU ring's
// schedule over MPI, the same bits as make_cpu_ring(mpi.size()).
class Mpi;
std::unique_ptr<Collective> make_mpi_ring(const Mpi& mpi);
// The GPU ring underneath (peer report, tests); null for any other collective.
DeviceRing* device_ring(Collective& c);

}  // namespace cutrain
