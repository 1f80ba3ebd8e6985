// defines: Ring, the all-reduce of R data-parallel replicas (the CPU ring; the CUDA ring with the
// same steps is train/replicas/device_ring.h), and ring_chunk and the schedule both rings share.
//
// The algorithm (Patarasuk and Yuan 2009; what NCCL runs within a machine): replica r sends
// only to r+1 and receives only from r-1 (mod R), so every link carries the same load and the
// time does not grow with R. A buffer of n elements is cut into R chunks (ring_chunk).
//   reduce-scatter, steps s = 0 .. R-2: replica r sends chunk (r - s) mod R to r+1, and adds
//     the chunk (r - 1 - s) mod R it receives from r-1 into its own (ring_reduce_cpu). The
//     last of these adds also multiplies by 1/R. Now replica r holds chunk (r + 1) mod R
//     summed over all replicas and averaged.
//   all-gather, steps s = 0 .. R-2: replica r sends chunk (r + 1 - s) mod R to r+1, which
//     stores it: after R-1 steps every replica holds every averaged chunk.
// Each replica sends 2 (R-1)/R n elements in all, whatever R: the bandwidth-optimal amount.
//
// Same bits everywhere: a chunk is reduced once, on one replica, and then copied, so every
// replica ends with identical bytes (and so takes identical optimizer steps). The order of
// the additions of chunk c is fixed by (c, R) alone, never by timing: a run is repeatable.
// Sum first, then 1/R: one rounding instead of R, in the same pass; in fp16 the sum may
// overflow where the average would not, which the loss scaler sees and corrects (a skipped
// step), where dividing first would silently flush small gradients to zero.
//
// How the CPU ring mirrors the GPU one. Each link r -> r+1 is a one-slot channel with two
// counters, `posted` and `taken`:
//   reduce-scatter: r waits until r+1 has taken the previous message, copies its chunk into
//     r+1's staging buffer (on a GPU: cudaMemcpyPeerAsync, or through pinned host memory
//     where the two devices cannot reach each other), posts; r+1 waits for the post, adds the
//     staging buffer into its chunk (the reduce kernel), takes.
//   all-gather: r copies its chunk straight into r+1's buffer (the peer registered the buffer
//     when it entered the collective), posts; r+1 takes.
// Every step sends before it receives; a sender waits for taken == posted before it writes,
// so it never overwrites a staging buffer or a chunk its neighbour still reads (on a GPU:
// events between the two comm streams instead of the mutex and condition variable).
//
// Use: every rank calls the same collectives in the same order, each from its own thread
// (a replica's communication thread), one collective at a time per rank.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nn/tensor.h"

namespace cutrain {

// Chunk c of R of n elements: [n c / R, n (c+1) / R). Sizes differ by at most one; with
// n < R some chunks are empty.
std::pair<int64_t, int64_t> ring_chunk(int64_t n, int R, int c);

// The schedule, shared with the CUDA ring (train/replicas/device_ring.h) so that both add the same
// chunks in the same order and give the same bits. Steps t = 0 .. 2R-3: reduce-scatter step t
// for t < R-1, all-gather step t-(R-1) after. At step t replica r sends chunk
// ring_send_chunk(R, r, t) = (r - t) mod R to r+1 and receives ring_recv_chunk(R, r, t) =
// (r - 1 - t) mod R, the chunk r-1 sends, from r-1 (the all-gather's (r + 1 - s) is the same
// chunk as (r - t) mod R).
int ring_send_chunk(int R, int r, int t);
int ring_recv_chunk(int R, int r, int t);

// One reduce step on the host: dst[i] = (dst[i] + src[i]) * scale for n elements of dtype (f32,
// f16 or f64; kernels/ring_reduce.h's ring_reduce_cpu). The CPU ring and the MPI ring
// (train/replicas/mpi.h) both add with it.
void ring_reduce(DType dtype, int64_t n, unsigned char* dst, const unsigned char* src,
                 double scale);

class Ring {
 public:
  explicit Ring(int replicas);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int size() const { return R_; }

  // Collective: on return, rank's buffer of n elements (dtype f32, f16 or f64) holds the sum
  // over all ranks, times 1/R when `average`. Throws when the ring was aborted.
  void all_reduce(int rank, void* data, int64_t n, DType dtype, bool average);

  // Collective: true on every rank when `flag` is true on any (a one-element all-reduce).
  bool any(int rank, bool flag);

  // Makes every rank waiting in a collective, and every later collective, throw an Error
  // carrying `why` (a UserError saying just `why` when `users`: the timeout's): a replica
  // that failed would otherwise leave its neighbours waiting for ever. Permanent.
  void abort(const std::string& why, bool users = false);

  // Bytes this rank has sent (copied into a neighbour) since construction.
  int64_t bytes_sent(int rank) const;

  // A rank that waits longer than `seconds` (0: for ever) for its neighbour aborts the ring
  // with a message naming the step (at_step: 0-based), itself and the neighbour.
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  void at_step(int64_t step) { step_ = step; }

 private:
  struct Link;
  void send_staged(int rank, const void* src, size_t bytes);
  template <typename F> void receive(int rank, F&& consume);
  void send_direct(int rank, int64_t offset_bytes, const void* src, size_t bytes);
  void wait(Link& l, std::unique_lock<std::mutex>& lock, int rank, bool for_post);

  void check_not_aborted();

  int R_;
  std::vector<std::unique_ptr<Link>> links_;  // links_[r]: the link r -> r+1
  std::atomic<bool> aborted_{false};
  std::atomic<double> timeout_s_{0};
  std::atomic<int64_t> step_{-1};
  std::mutex abort_mu_;                       // guards why_ and users_
  std::string why_;
  bool users_ = false;
};

}  // namespace cutrain
