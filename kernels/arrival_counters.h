// defines: arrival_counters(), the zeroed device counters of the kernels whose last block
// finishes a reduction (last_block_to_arrive, kernels/cuda_util.cuh).
#pragma once
#include "kernels/gpu.h"

namespace cutrain {

// Device unsigned ints that are zero whenever no kernel runs, for kernels
// whose last-arriving block finishes the work of the others (a reduction's finalize folded
// into the kernel that makes its partials: last_block_to_arrive in kernels/cuda_util.cuh),
// saving the second launch. The block that arrives last sets its counter back to 0, so the
// next kernel finds them zero without a memset. One array per (device, stream id): kernels on
// one stream run one after another and never share a counter, kernels on two streams never
// see each other's. At least n counters; made on a stream's first use and grown by doubling,
// zeroed before they are returned (outside the stream: safe while it captures a graph).
// Arrays are never freed: a few KiB per stream that used them, for the life of the process.
unsigned* arrival_counters(cudaStream_t stream, int n);

}  // namespace cutrain
