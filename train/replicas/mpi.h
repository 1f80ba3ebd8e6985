// defines: Mpi, this process's place among the processes of a run that mpirun started, and the
// few host-side collectives the trainer needs between them besides the gradients' ring
// (make_mpi_ring, train/replicas/collective.h).
//
// `mpirun -np N cutrain train ...` starts N processes, ranks 0 .. N-1, each one replica: rank r
// trains on shard r of every batch (data/sampler.h), its gradient buckets are averaged with
// the others' by a ring over MPI that adds the same chunks in the same order as the CPU ring
// (so the weights are those of `--devices cpu,cpu,...` with the same global batch, bit for
// bit), and rank 0 alone prints, evaluates and writes checkpoints. A process that mpirun did not
// start (OpenMPI's environment, OMPI_COMM_WORLD_SIZE, says so) never calls MPI.
//
//   std::unique_ptr<Mpi> mpi = Mpi::start_if_launched(&argc, &argv);   // main(): null alone
//   if (mpi) ... mpi->rank(), mpi->size(), mpi->sum(images) ...
//
// Every rank calls the same collectives in the same order. A rank that fails calls abort():
// mpirun then stops every rank (a rank killed outright is noticed by mpirun the same way).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cutrain {

class Mpi {
 public:
  // MPI_Init when mpirun started this process, else null (and MPI is never touched).
  static std::unique_ptr<Mpi> start_if_launched(int* argc, char*** argv);
  ~Mpi();  // MPI_Finalize
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  // The processes of this run on this machine (OMPI_COMM_WORLD_LOCAL_SIZE; 1 if unset):
  // they share its cores.
  int local_size() const { return local_size_; }
  // Its place among them (OMPI_COMM_WORLD_LOCAL_RANK; 0 if unset): a GPU rank's device.
  int local_rank() const { return local_rank_; }

  // Host collectives, blocking.
  // all = every rank's `bytes` bytes, in rank order (all holds size() * bytes).
  void all_gather(const void* mine, size_t bytes, void* all) const;
  // Every rank's text, of any length, in rank order (the bad files each rank found).
  std::vector<std::string> all_gather_text(const std::string& mine) const;
  int64_t sum(int64_t v) const;
  int64_t max(int64_t v) const;
  // Every rank's n int32 flags become their bitwise OR over the ranks.
  void bitwise_or(int32_t* flags, int64_t n) const;
  // n bytes to rank `to` and n bytes from rank `from` into `in` (the ring's step).
  void send_receive(const void* out, size_t out_bytes, int to, void* in, size_t in_bytes,
                    int from) const;
  void barrier() const;
  // root's `bytes` bytes at data, to every rank's data.
  void broadcast(void* data, size_t bytes, int root) const;
  // This machine's name (MPI_Get_processor_name): which ranks share a machine.
  std::string host() const;

  // Stops every rank of the run (MPI_Abort) with `code`; after printing why.
  [[noreturn]] void abort(int code) const;

 private:
  Mpi() = default;
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
};

}  // namespace cutrain
