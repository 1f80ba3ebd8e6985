// Ring: the CPU ring all-reduce (the algorithm and its synchronisation are in ring.h).
#include "train/replicas/ring.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "kernels/check.h"
#include "kernels/ring_reduce.h"
#include "train/replicas/deadline.h"

namespace cutrain {

std::pair<int64_t, int64_t> ring_chunk(int64_t n, int R, int c) {
  return {n * c / R, n * (c + 1) / R};
}

int ring_send_chunk(int R, int r, int t) { return (((r - t) % R) + R) % R; }
int ring_recv_chunk(int R, int r, int t) { return ring_send_chunk(R, r - 1, t); }

struct Ring::Link {
  std::mutex mu;
  std::condition_variable cv;
  int64_t posted = 0;                  // messages the sender has put in place
  int64_t taken = 0;                   // messages the receiver is done with
  std::vector<unsigned char> staging;  // reduce-scatter chunks: sender writes, receiver reads
  unsigned char* dst = nullptr;        // the receiver's buffer in the current collective
  int64_t bytes = 0;                   // sent over this link
};

Ring::Ring(int replicas) : R_(replicas) {
  CHECK(replicas >= 1, "Ring: need at least one replica, got " << replicas);
  for (int r = 0; r < R_; r++) links_.push_back(std::make_unique<Link>());
}

Ring::~Ring() = default;

int64_t Ring::bytes_sent(int rank) const {
  Link& l = *links_[size_t(rank)];
  std::lock_guard<std::mutex> lock(l.mu);
  return l.bytes;
}

void Ring::abort(const std::string& why, bool users) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (!aborted_) why_ = why, users_ = users;
    aborted_ = true;
  }
  // Under each link's mutex, so a rank between its check and its wait cannot miss it.
  for (auto& l : links_) {
    std::lock_guard<std::mutex> lock(l->mu);
    l->cv.notify_all();
  }
}

void Ring::check_not_aborted() {
  if (!aborted_) return;
  std::lock_guard<std::mutex> lock(abort_mu_);
  USER_CHECK(!users_, why_);
  CHECK(false, "replica all-reduce aborted: " << why_);
}

// for_post: wait until a message is there to take (receiver); else until the previous message
// was taken (sender). Past the timeout the ring is aborted, naming the neighbour.
void Ring::wait(Link& l, std::unique_lock<std::mutex>& lock, int rank, bool for_post) {
  auto ready = [&] { return aborted_ || (for_post ? l.posted > l.taken : l.taken == l.posted); };
  const double timeout = timeout_s_;
  Deadline deadline(timeout);
  if (timeout <= 0) {
    l.cv.wait(lock, ready);
  } else {
    while (!l.cv.wait_for(lock, std::chrono::duration<double>(Deadline::kPollSeconds), ready))
      if (deadline.passed()) break;
  }
  if (!ready()) {
    const int R = R_, other = for_post ? (rank + R - 1) % R : (rank + 1) % R;
    std::ostringstream why;
    why << "collective timeout: replica " << rank << " waited " << timeout << " s";
    if (step_ >= 0) why << " at step " << step_ + 1;
    why << " in the all-reduce for replica " << other << ", which "
        << (for_post ? "never sent its chunk" : "never took this replica's")
        << " (--collective-timeout " << timeout << ")";
    lock.unlock();
    abort(why.str(), true);
    throw UserError(why.str());
  }
  if (aborted_) {
    lock.unlock();
    check_not_aborted();
  }
}

void Ring::send_staged(int rank, const void* src, size_t bytes) {
  Link& out = *links_[size_t(rank)];
  std::unique_lock<std::mutex> lock(out.mu);
  wait(out, lock, rank, false);
  if (out.staging.size() < bytes) out.staging.resize(bytes);  // the receiver is not reading
  lock.unlock();
  if (bytes) std::memcpy(out.staging.data(), src, bytes);
  lock.lock();
  out.posted++;
  out.bytes += int64_t(bytes);
  out.cv.notify_all();
}

void Ring::send_direct(int rank, int64_t offset_bytes, const void* src, size_t bytes) {
  Link& out = *links_[size_t(rank)];
  std::unique_lock<std::mutex> lock(out.mu);
  wait(out, lock, rank, false);
  unsigned char* dst = out.dst;
  lock.unlock();
  if (bytes) std::memcpy(dst + offset_bytes, src, bytes);
  lock.lock();
  out.posted++;
  out.bytes += int64_t(bytes);
  out.cv.notify_all();
}

template <typename F> void Ring::receive(int rank, F&& consume) {
  Link& in = *links_[size_t((rank + R_ - 1) % R_)];
  std::unique_lock<std::mutex> lock(in.mu);
  wait(in, lock, rank, true);
  lock.unlock();
  consume(in.staging.data());
  lock.lock();
  in.taken++;
  in.cv.notify_all();
}

void ring_reduce(DType dtype, int64_t n, unsigned char* dst, const unsigned char* src,
                 double scale) {
  switch (dtype) {
    case DType::f32:
      ring_reduce_cpu<float>(n, reinterpret_cast<float*>(dst),
                             reinterpret_cast<const float*>(src), scale);
      break;
    case DType::f16:
      ring_reduce_cpu<half_t>(n, reinterpret_cast<half_t*>(dst),
                              reinterpret_cast<const half_t*>(src), scale);
      break;
    case DType::f64:
      ring_reduce_cpu<double>(n, reinterpret_cast<double*>(dst),
                              reinterpret_cast<const double*>(src), scale);
      break;
    case DType::i32: CHECK(false, "all_reduce: i32 buffers are not reduced");
  }
}

void Ring::all_reduce(int rank, void* data, int64_t n, DType dtype, bool average) {
  CHECK(rank >= 0 && rank < R_, "all_reduce: rank " << rank << " outside [0, " << R_ << ")");
  CHECK(n >= 0 && (n == 0 || data), "all_reduce: bad buffer (" << n << " elements)");
  CHECK(dtype != DType::i32, "all_reduce: i32 buffers are not reduced");
  check_not_aborted();
  if (R_ == 1) return;  // the sum of one is itself, and so is its average
  const int R = R_, r = rank;
  const size_t es = dtype_size(dtype);
  unsigned char* buf = static_cast<unsigned char*>(data);
  {  // register the buffer for the all-gather writes of rank r-1
    Link& in = *links_[size_t((r + R - 1) % R)];
    std::lock_guard<std::mutex> lock(in.mu);
    in.dst = buf;
  }
  // reduce-scatter
  for (int s = 0; s < R - 1; s++) {
    const auto [sb, se] = ring_chunk(n, R, ring_send_chunk(R, r, s));
    send_staged(r, buf + sb * es, size_t(se - sb) * es);
    const auto [rb, re] = ring_chunk(n, R, ring_recv_chunk(R, r, s));
    const double scale = (average && s == R - 2) ? 1.0 / R : 1.0;
    receive(r, [&](const unsigned char* staging) {
      ring_reduce(dtype, re - rb, buf + rb * es, staging, scale);
    });
  }
  // all-gather: rank r now owns chunk (r + 1) mod R
  for (int s = 0; s < R - 1; s++) {
    const auto [sb, se] = ring_chunk(n, R, ring_send_chunk(R, r, R - 1 + s));
    send_direct(r, sb * int64_t(es), buf + sb * es, size_t(se - sb) * es);
    receive(r, [](const unsigned char*) {});
  }
}

bool Ring::any(int rank, bool flag) {
  float v = flag ? 1.0f : 0.0f;  // a sum of at most R ones: exact
  all_reduce(rank, &v, 1, DType::f32, false);
  return v > 0;
}

}  // namespace cutrain
