// defines: ring_reduce_cpu, the reduce step of the ring all-reduce (train/ring.h): one chunk of
// a neighbour's gradients, just received, added into this replica's own chunk.
//
// math, per element: dst[i] = T((A(dst[i]) + A(src[i])) * scale), A = acc_t<T> (fp32 for
// fp16 and fp32, fp64 for fp64). scale is 1 for every step of the reduce-scatter but the last,
// where it is 1/R: the sum of R replicas' gradients becomes their average in the same pass,
// one rounding, no extra sweep over the buffer. (a + b) * 1 is a + b exactly.
// bytes: 2 reads and 1 write of n elements; flops: 2n. Memory-bound: on a GPU it runs at
// copy bandwidth and hides behind the peer copy of the next chunk.
// precision: fp16 chunks are added in fp32 and rounded back to fp16 once per ring step, so a
// sum over R replicas is rounded R-1 times (each at most half an fp16 ulp).
//
// GPU twin: arrives with the CUDA ring (cudaMemcpyPeerAsync into a staging buffer on the comm
// stream, then this kernel on the same stream); it must give the same bits as this function.
#pragma once
#include <cstdint>

#include "kernels/half.h"

namespace cutrain {

template <typename T> void ring_reduce_cpu(int64_t n, T* dst, const T* src, double scale);

}  // namespace cutrain
