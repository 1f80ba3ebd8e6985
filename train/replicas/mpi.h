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
//
// A rank that stops without dying (a hung file read, a stuck driver call, SIGSTOP) would leave
// the others waiting in a collective for ever. So every blocking call here waits with a
// deadline, set_timeout (--collective-timeout, 600 s by default; the clock is Deadline's,
// which does not count time the process was stopped): it polls its requests (non-blocking
// MPI), and past the deadline it asks every other rank where it is (a small message each; a
// rank answers from inside its own waits, so a rank that is stopped or stuck outside the
// collectives does not answer within kAskSeconds, or CUTRAIN_COLLECTIVE_ASK_SECONDS: the tests
// give a loaded machine's reaction room with it). If the call completes meanwhile (a rank
// that was only late) the wait ends normally; else it throws a UserError naming the step, the
// call, the partner or the ranks it was waiting for, and each rank's answer. In a
// RootWorksAlone scope (rank 0 evaluates or writes a checkpoint while the others wait for it)
// the other ranks wait without a deadline, and still answer questions. Not bounded: the
// set-up's waits, before set_timeout (rank 0 resolves the data alone), and a rank 0 that hangs
// while it works alone (the others wait for it without a deadline).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

namespace cutrain {

class Deadline;  // train/replicas/deadline.h

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

  // The collective timeout in seconds (0: none), and the step the run is at, for its message.
  void set_timeout(double seconds) const { timeout_s_ = seconds; }
  void at_step(int64_t step) const { step_ = step; }
  // A phase where rank 0 works alone (it evaluates, writes a checkpoint) while the others wait
  // for it in the collective that ends the phase: while one lives, the other ranks wait without
  // a deadline. Rank 0 keeps its own: it arrives last, and a rank missing then is stopped.
  class RootWorksAlone {
   public:
    explicit RootWorksAlone(const Mpi* mpi) : mpi_(mpi && !mpi->root() ? mpi : nullptr) {
      if (mpi_) mpi_->alone_++;
    }
    ~RootWorksAlone() {
      if (mpi_) mpi_->alone_--;
    }
    RootWorksAlone(const RootWorksAlone&) = delete;
    RootWorksAlone& operator=(const RootWorksAlone&) = delete;

   private:
    const Mpi* mpi_;
  };
  // How long a rank that timed out waits for the others' answers (ask_s_: this, unless
  // CUTRAIN_COLLECTIVE_ASK_SECONDS says otherwise).
  static constexpr double kAskSeconds = 5;

 private:
  struct Answer;  // where a rank is, its answer to one that timed out (mpi.cpp)
  struct Sent;    // a question or an answer sent, not yet known delivered
  Mpi();
  // Waits for the n requests of the call `what`; `partner` >= 0: the rank a point-to-point
  // call waits for (else every rank may be the one). See the top of this file.
  void complete(void* requests, int n, const char* what, int partner = -1) const;
  // Answers the questions other ranks that timed out sent this one.
  void answer_questions() const;
  // Forgets the sends of sent_ that are done.
  void reap_sent() const;
  // Past the deadline: asks every other rank where it is and collects the answers for
  // ask_s_ (answers_, answered_), testing the n requests meanwhile: true when they
  // completed (a rank that was only late).
  bool ask_others(void* requests, int n) const;
  // "rank 0 waited 600 s at step 12 in MPI_Sendrecv with rank 1 (--collective-timeout 600)".
  std::string waited_text(const char* what, int partner, const Deadline& waited) const;
  // Throws the timeout's UserError from the answers. After it the process may call nothing of
  // MPI but abort(): the failed call's requests are still posted.
  [[noreturn]] void fail_timed_out(const char* what, int partner, const Deadline& waited) const;

  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
  mutable double timeout_s_ = 0;
  double ask_s_ = kAskSeconds;
  mutable int64_t step_ = -1;     // -1: before the first step
  mutable int alone_ = 0;         // RootWorksAlone scopes open (never on rank 0)
  mutable int64_t calls_ = 0;     // blocking calls entered: where this rank is, for the others
  mutable const char* in_ = nullptr;  // the call it is waiting in, or null
  mutable int64_t asked_ = 0;                 // questions asked so far
  mutable std::list<Sent> sent_;              // questions and answers whose sends may be pending
  mutable std::vector<Answer> answers_;       // the last ask's, by rank
  mutable std::vector<bool> answered_;
};

}  // namespace cutrain
