// The input conversion on the GPU: crop, flip and normalise a batch of uint8 images.
//
// Math: input.h (must equal input_normalize_crop_cpu bit for bit).
// The trick: an output value depends only on the byte v and the channel c, so a block first
// computes all 256 x C possible values with the exact formula (input_value, two IEEE
// divisions each) into a table in shared memory, then every element is a byte load, a table
// lookup and a store. The divisions (tens of instructions each when correctly rounded) would
// otherwise make this memory-bound kernel compute-bound.
//
// Launch: grid (gx, S), 256 threads. blockIdx.y is the output row i. A block covers rpi
// output rows i of rpi different samples at once (rpi = 256 / (S*C) when a row is short,
// else 1); thread t owns element k = t % (S*C) (and k + 256, k + 512, ... of long rows) of
// row r = t / (S*C), and loops over samples n = blockIdx.x*rpi + r, stepping gridDim.x*rpi.
// Consecutive threads write consecutive elements of y (coalesced) and read consecutive bytes
// of the source row (backwards when flipped).
// Bytes: input_normalize_gpu_cost (input.h): 1 read + sizeof(T) written per element, plus the
//   table (256 C entries, in shared memory) per block.
// Flops: input_normalize_gpu_cost: 3 per table entry; none per element.
// Precision: input_value (input.h), the CPU's formula: the same bits.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/input.h"

namespace cutrain {

// kInputBlock (256 threads) and the grid: input_gpu_grid in input.h.
constexpr int kInputMaxC = 16;  // table of 256 x 16 floats = 16 KiB of shared memory

template <typename TD>
__global__ void input_normalize_kernel(int N, int Hin, int Win, int C, int S, int rpi,
                                       const uint8_t* x, const InputCrop* crop,
                                       const float* mean, const float* stddev, TD* y,
                                       bool mirror) {
  extern __shared__ __align__(16) unsigned char input_smem[];
  TD* table = reinterpret_cast<TD*>(input_smem);  // (C,256): table[c*256 + v]
  for (int e = threadIdx.x; e < 256 * C; e += blockDim.x) {
    const int c = e >> 8, v = e & 255;
    table[e] = from_acc<TD>(input_value<float>(uint8_t(v), mean[c], stddev[c]));
  }
  __syncthreads();  // the last barrier: threads may leave from here on

  const int L = S * C;  // elements in one output row
  const int i = blockIdx.y;
  const int r = threadIdx.x / L;
  if (r >= rpi) return;  // the few threads past the block's last whole row
  for (int k = threadIdx.x - r * L; k < L; k += blockDim.x) {
    const int j = k / C, c = k - j * C;  // output column and channel of element k
    const TD* tc = table + c * 256;
    for (int n = blockIdx.x * rpi + r; n < N; n += int(gridDim.x) * rpi) {
      int top = 0, left = 0, flip = 0;
      if (crop) top = crop[n].top, left = crop[n].left, flip = crop[n].flip;
      const int jj = left + ((flip != 0) != mirror ? S - 1 - j : j);  // source column
      const uint8_t v = x[((int64_t(n) * Hin + top + i) * Win + jj) * C + c];
      y[(int64_t(n) * S + i) * L + k] = tc[v];
    }
  }
}

template <typename T>
void input_normalize_gpu(int N, int Hin, int Win, int C, int S, const uint8_t* x,
                         const InputCrop* crop, const float* mean, const float* stddev, T* y,
                         cudaStream_t stream, bool mirror) {
  CHECK(N > 0 && Hin > 0 && Win > 0 && C > 0 && S > 0,
        "input normalisation: sizes must be positive, got (N,Hin,Win,C) = ("
            << N << "," << Hin << "," << Win << "," << C << ") and S = " << S);
  CHECK(S <= Hin && S <= Win, "input crop: the " << S << "x" << S << " window is larger than the "
                                                 << Hin << "x" << Win << " images");
  CHECK(C <= kInputMaxC, "input normalisation on the GPU: at most " << kInputMaxC
                             << " channels, got " << C);
  CHECK(S <= 65535 && int64_t(S) * C <= (int64_t(1) << 30),
        "input normalisation on the GPU: rows of " << S << " x " << C << " are too long");
  const InputGrid g = input_gpu_grid(N, C, S);  // ~8192 blocks at most
  const int rpi = g.rpi, gx = g.gx;
  const size_t smem = size_t(256) * C * sizeof(T);
  using TD = storage_t<T>;
  input_normalize_kernel<TD><<<dim3(unsigned(gx), unsigned(S)), kInputBlock, smem, stream>>>(
      N, Hin, Win, C, S, rpi, x, crop, mean, stddev, reinterpret_cast<TD*>(y), mirror);
  LAUNCH_CHECK();
}

template void input_normalize_gpu<float>(int, int, int, int, int, const uint8_t*,
                                         const InputCrop*, const float*, const float*, float*,
                                         cudaStream_t, bool);
template void input_normalize_gpu<half_t>(int, int, int, int, int, const uint8_t*,
                                          const InputCrop*, const float*, const float*, half_t*,
                                          cudaStream_t, bool);

}  // namespace cutrain
