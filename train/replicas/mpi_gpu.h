// defines: the collective between the GPUs of a run that mpirun started, one GPU replica per
// process (train/replicas/mpi.h): NCCL when every rank has a GPU of its own and NCCL can be
// loaded, else the host-staged MPI ring. choose_gpu_transport is the choice, apart so that it
// is tested without GPUs.
//
//   NCCL        ncclAllReduce (sum) and then x 1/R (ring_scale_gpu) of each gradient bucket on
//               a comm stream that waits for the bucket's mark (an event on the compute stream):
//               it overlaps the rest of the backward as the peer ring does, and the compute
//               stream waits for it before the optimizer. Sum first, then 1/R, as both rings do
//               (train/replicas/ring.h: in fp16, an overflow the loss scaler sees rather than
//               small gradients flushed to zero). The unique id goes from rank 0 to the others
//               over MPI (MPI_Bcast), as llm.c does. NCCL is loaded when a run needs it
//               (dlopen libnccl.so.2), so the program runs on a machine without it. The sums are
//               NCCL's, in NCCL's order: repeatable for the same GPUs and ranks, but not the
//               bits of the rings or of --devices 0,1.
//   host-staged each bucket waits for its mark, comes to the host, goes through the MPI ring
//               (make_mpi_ring: the CPU ring's schedule and additions) and back. The host
//               blocks and the GPU idles meanwhile: a fallback, not a fast path. Its additions
//               are ring_reduce_cpu's, which ring_reduce_gpu equals bit for bit, so two
//               processes sharing one GPU train exactly as one process with --devices 0,0.
//
// The choice (every rank makes the same one, from the same gathered facts):
//   NCCL        when this cutrain was built with NCCL's header, libnccl.so.2 loads on every
//               rank, no two ranks use the same GPU (NCCL needs one per rank) and CUTRAIN_NCCL
//               is not 0;
//   host-staged otherwise, with the reason in the run's replicas line.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/gpu.h"

namespace cutrain {

class Collective;
class Mpi;

struct GpuTransport {
  bool nccl = false;
  std::string why;  // host-staged: the reason ("ranks 0 and 1 share GPU ..."); NCCL: ""
};

// places[r]: rank r's GPU as "machine/PCI bus id"; nccl_missing: "" when every rank loaded
// NCCL, else why not (this build, the library); nccl_off: CUTRAIN_NCCL=0 on some rank.
GpuTransport choose_gpu_transport(const std::vector<std::string>& places,
                                  const std::string& nccl_missing, bool nccl_off);

// The collective of this rank's replica on GPU `device`, its compute stream `stream`: every
// rank calls it at the same point (it gathers the ranks' GPUs, and NCCL's set-up is collective).
std::unique_ptr<Collective> make_mpi_gpu_collective(const Mpi& mpi, int device,
                                                    cudaStream_t stream);

}  // namespace cutrain
