// Mpi (train/replicas/mpi.h) on OpenMPI's C API, and the MPI ring: the CPU ring's schedule
// (train/replicas/ring.h) with one process per rank and MPI_Sendrecv as the link.
#include "train/replicas/mpi.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "kernels/check.h"
#include "train/replicas/collective.h"
#include "train/replicas/ring.h"

namespace cutrain {

namespace {
// An MPI call's error as a cutrain error (MPI's default handler would abort the job instead;
// start_if_launched asks for errors to be returned).
void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  CHECK(false, "MPI: " << what << " failed: " << std::string(text, size_t(len)));
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// MPI counts are ints: a buffer is sent in pieces below 1 GiB.
constexpr size_t kPiece = size_t(1) << 30;
}  // namespace

std::unique_ptr<Mpi> Mpi::start_if_launched(int* argc, char*** argv) {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return nullptr;
  std::unique_ptr<Mpi> m(new Mpi());
  mpi_check(MPI_Init(argc, argv), "MPI_Init");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &m->rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &m->size_), "MPI_Comm_size");
  m->local_size_ = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  m->local_rank_ = std::max(0, env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0));
  return m;
}

Mpi::~Mpi() { MPI_Finalize(); }

void Mpi::all_gather(const void* mine, size_t bytes, void* all) const {
  CHECK(bytes <= size_t(INT_MAX), "Mpi::all_gather: " << bytes << " bytes");
  mpi_check(MPI_Allgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgather");
}

std::vector<std::string> Mpi::all_gather_text(const std::string& mine) const {
  const int64_t n = int64_t(mine.size());
  std::vector<int64_t> sizes(size_t(size_), 0);
  all_gather(&n, sizeof n, sizes.data());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  CHECK(total <= INT_MAX, "Mpi::all_gather_text: " << total << " bytes in all");
  std::vector<int> counts, offsets;
  for (int64_t s = 0, r = 0; r < size_; s += sizes[size_t(r)], r++) {
    offsets.push_back(int(s));
    counts.push_back(int(sizes[size_t(r)]));
  }
  std::string all(size_t(total), '\0');
  mpi_check(MPI_Allgatherv(mine.data(), int(n), MPI_CHAR, all.data(), counts.data(),
                           offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
            "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int r = 0; r < size_; r++) out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(sizes[size_t(r)])));
  return out;
}

int64_t Mpi::sum(int64_t v) const {
  int64_t out = 0;
  mpi_check(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

int64_t Mpi::max(int64_t v) const {
  int64_t out = 0;
  mpi_check(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

void Mpi::bitwise_or(int32_t* flags, int64_t n) const {
  CHECK(n >= 0 && n <= INT_MAX, "Mpi::bitwise_or: " << n << " flags");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, flags, int(n), MPI_INT32_T, MPI_BOR, MPI_COMM_WORLD),
            "MPI_Allreduce");
}

void Mpi::send_receive(const void* out, size_t out_bytes, int to, void* in, size_t in_bytes,
                       int from) const {
  const char* o = static_cast<const char*>(out);
  char* i = static_cast<char*>(in);
  // Both sides cut the same sizes into the same pieces: the sender's out_bytes is the
  // receiver's in_bytes, so every piece has a partner.
  for (size_t done_o = 0, done_i = 0; done_o < out_bytes || done_i < in_bytes;) {
    const size_t no = std::min(kPiece, out_bytes - done_o), ni = std::min(kPiece, in_bytes - done_i);
    mpi_check(MPI_Sendrecv(o + done_o, int(no), MPI_BYTE, no ? to : MPI_PROC_NULL, 0, i + done_i,
                           int(ni), MPI_BYTE, ni ? from : MPI_PROC_NULL, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
    done_o += no, done_i += ni;
  }
}

void Mpi::barrier() const { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void Mpi::broadcast(void* data, size_t bytes, int root) const {
  CHECK(bytes <= size_t(INT_MAX), "Mpi::broadcast: " << bytes << " bytes");
  mpi_check(MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

std::string Mpi::host() const {
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  mpi_check(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
  return std::string(name, size_t(len));
}

void Mpi::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // not reached: MPI_Abort does not return
}

namespace {

// One replica per process. The CPU's work is complete when it is queued, so mark and wait do
// nothing and each collective runs at once, as the CPU ring's does.
class MpiRing : public Collective {
 public:
  explicit MpiRing(const Mpi& mpi) : mpi_(mpi) {}
  int size() const override { return mpi_.size(); }
  void mark(int, int) override {}
  // The CPU ring's steps (train/replicas/ring.h), rank r of R: reduce-scatter, each step
  // sending chunk ring_send_chunk to r+1 while receiving ring_recv_chunk from r-1 into a
  // staging buffer, added with the CPU ring's ring_reduce (1/R at the last step); then the
  // all-gather, each averaged chunk received straight into place. The same additions in the
  // same order as the threads of --devices cpu,cpu,...: the same bits.
  void all_reduce(int, const std::vector<void*>& data, int64_t n, DType dtype,
                  bool average) override {
    CHECK(data.size() == 1, "MPI ring: " << data.size() << " buffers in one process (one "
                                         << "replica per process)");
    CHECK(dtype != DType::i32, "all_reduce: i32 buffers are not reduced");
    const int R = size(), r = mpi_.rank();
    if (R == 1 || n == 0) return;
    const int next = (r + 1) % R, prev = (r + R - 1) % R;
    const size_t es = dtype_size(dtype);
    unsigned char* buf = static_cast<unsigned char*>(data[0]);
    for (int s = 0; s < R - 1; s++) {
      const auto [sb, se] = ring_chunk(n, R, ring_send_chunk(R, r, s));
      const auto [rb, re] = ring_chunk(n, R, ring_recv_chunk(R, r, s));
      staging_.resize(size_t(re - rb) * es);
      mpi_.send_receive(buf + sb * es, size_t(se - sb) * es, next, staging_.data(),
                        staging_.size(), prev);
      const double scale = average && s == R - 2 ? 1.0 / R : 1.0;  // 1/R at the last step
      ring_reduce(dtype, re - rb, buf + rb * es, staging_.data(), scale);
    }
    for (int s = 0; s < R - 1; s++) {
      const auto [sb, se] = ring_chunk(n, R, ring_send_chunk(R, r, R - 1 + s));
      const auto [rb, re] = ring_chunk(n, R, ring_recv_chunk(R, r, R - 1 + s));
      mpi_.send_receive(buf + sb * es, size_t(se - sb) * es, next, buf + rb * es,
                        size_t(re - rb) * es, prev);
    }
  }
  // The CPU ring's OR, over the processes.
  void any(int, const std::vector<int32_t*>& flags, int64_t n) override {
    CHECK(flags.size() == 1, "MPI ring: " << flags.size() << " flag sets in one process");
    mpi_.bitwise_or(flags[0], n);
  }
  void wait(int) override {}
  std::string describe() const override {
    return std::to_string(size()) + " processes (mpirun) on the MPI ring, one replica each";
  }

 private:
  const Mpi& mpi_;
  std::vector<unsigned char> staging_;
};

}  // namespace

std::unique_ptr<Collective> make_mpi_ring(const Mpi& mpi) {
  return std::make_unique<MpiRing>(mpi);
}

}  // namespace cutrain
