// Mpi (train/replicas/mpi.h) on OpenMPI's C API, and the MPI ring: the CPU ring's schedule
// (train/replicas/ring.h) with one process per rank and MPI_Sendrecv as the link.
#include "train/replicas/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "train/replicas/collective.h"
#include "train/replicas/deadline.h"
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

// The timeout's questions and answers (mpi.h), point to point on tags of their own: the
// collectives' traffic is in another context, and the ring's sends use tag 0.
constexpr int kAskTag = 31001, kAnswerTag = 31002;
}  // namespace

struct Mpi::Answer {
  int64_t nonce = 0;   // the asker's, echoed
  int64_t step = -1;   // the answering rank's step
  int64_t calls = 0;   // its blocking calls so far
  int32_t alone = 0;   // it waits for rank 0, which works alone (Mpi::RootWorksAlone)
  char in[40] = {};    // the call it waits in ("" : none)
};

struct Mpi::Sent {     // a question (body.nonce) or an answer (body), kept until its send is done
  Answer body;
  MPI_Request request = MPI_REQUEST_NULL;
};

std::unique_ptr<Mpi> Mpi::start_if_launched(int* argc, char*** argv) {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return nullptr;
  std::unique_ptr<Mpi> m(new Mpi());
  mpi_check(MPI_Init(argc, argv), "MPI_Init");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &m->rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &m->size_), "MPI_Comm_size");
  m->local_size_ = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  m->local_rank_ = std::max(0, env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0));
  if (const char* ask = std::getenv("CUTRAIN_COLLECTIVE_ASK_SECONDS"); ask && std::atof(ask) > 0)
    m->ask_s_ = std::atof(ask);
  return m;
}

Mpi::Mpi() = default;
Mpi::~Mpi() {
  // The questions and answers still unconfirmed (a peer that stopped): let MPI keep them.
  for (Sent& m : sent_)
    if (m.request != MPI_REQUEST_NULL) MPI_Request_free(&m.request);
  MPI_Finalize();
}

// ---- waiting with a deadline ---------------------------------------------------------------

void Mpi::complete(void* requests, int n, const char* what, int partner) const {
  MPI_Request* reqs = static_cast<MPI_Request*>(requests);
  calls_++;
  in_ = what;
  // No deadline for a rank that waits for rank 0 working alone (RootWorksAlone).
  Deadline deadline(alone_ > 0 ? 0 : timeout_s_);
  for (long spins = 0;; spins++) {
    int done = 0;
    mpi_check(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what);
    if (done) break;
    if (spins % 64 == 0 && timeout_s_ > 0) {
      answer_questions();
      // Past the deadline: ask the others where they are; a rank that was only late lets this
      // call complete meanwhile, and the run goes on.
      if (deadline.passed()) {
        std::fprintf(stderr, "cutrain: %s; asking the other ranks where they are (%.0f s)\n",
                     waited_text(what, partner, deadline).c_str(), ask_s_);
        if (!ask_others(reqs, n)) fail_timed_out(what, partner, deadline);
        std::fprintf(stderr, "cutrain: rank %d: %s completed after all: a rank was late, not "
                             "gone; the run goes on\n", rank_, what);
        break;
      }
    }
    // A spin first (a collective usually completes within microseconds), then short naps (a
    // rank waiting for a slow one need not hold a core), then, past about 0.1 s, longer ones
    // (the others at an evaluation: a millisecond late is nothing there).
    if (spins > 4000)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else if (spins > 2000)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  in_ = nullptr;
}

void Mpi::answer_questions() const {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
    if (!flag) return;
    int64_t nonce = 0;
    mpi_check(MPI_Recv(&nonce, 1, MPI_INT64_T, st.MPI_SOURCE, kAskTag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              "MPI_Recv");
    reap_sent();
    sent_.emplace_back();
    Answer& a = sent_.back().body;
    a.nonce = nonce, a.step = step_, a.calls = calls_, a.alone = alone_;
    std::strncpy(a.in, in_ ? in_ : "", sizeof a.in - 1);
    // Not waited for: the asker may have given up on it (it then stays unread).
    mpi_check(MPI_Isend(&a, int(sizeof a), MPI_BYTE, st.MPI_SOURCE, kAnswerTag, MPI_COMM_WORLD,
                        &sent_.back().request),
              "MPI_Isend");
  }
}

void Mpi::reap_sent() const {
  sent_.remove_if([](Sent& m) {
    int done = 0;
    MPI_Test(&m.request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

bool Mpi::ask_others(void* requests, int n) const {
  MPI_Request* reqs = static_cast<MPI_Request*>(requests);
  const int64_t nonce = (int64_t(rank_) << 40) | ++asked_;
  answers_.assign(size_t(size_), Answer{});
  std::vector<bool> answered(size_t(size_), false);
  std::vector<MPI_Request> recv(size_t(size_), MPI_REQUEST_NULL);
  auto post = [&](int r) {
    mpi_check(MPI_Irecv(&answers_[size_t(r)], int(sizeof(Answer)), MPI_BYTE, r, kAnswerTag,
                        MPI_COMM_WORLD, &recv[size_t(r)]),
              "MPI_Irecv");
  };
  // The questions' sends are not waited for (a stopped rank must not hold the asker up): each
  // keeps its buffer until it is done (sent_).
  reap_sent();
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    post(r);
    sent_.emplace_back();
    sent_.back().body.nonce = nonce;
    mpi_check(MPI_Isend(&sent_.back().body.nonce, 1, MPI_INT64_T, r, kAskTag, MPI_COMM_WORLD,
                        &sent_.back().request),
              "MPI_Isend");
  }
  bool completed = false;
  Deadline ask(ask_s_);
  while (!ask.passed()) {
    int done = 0;
    mpi_check(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) {
      completed = true;
      break;
    }
    // (A rank that answered may still be on its way into this call: the whole window is its.)
    for (int r = 0; r < size_; r++) {
      if (r == rank_ || answered[size_t(r)]) continue;
      int got = 0;
      mpi_check(MPI_Test(&recv[size_t(r)], &got, MPI_STATUS_IGNORE), "MPI_Test");
      if (got && answers_[size_t(r)].nonce != nonce) post(r);  // a late answer to an earlier ask
      answered[size_t(r)] = got && answers_[size_t(r)].nonce == nonce;
    }
    answer_questions();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // The receives still open are cancelled (a receive's cancel completes at once) before their
  // buffers are reused; a late answer then waits unread, and the next ask skips it.
  for (int r = 0; r < size_; r++) {
    if (recv[size_t(r)] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&recv[size_t(r)]);
    MPI_Status st;
    MPI_Wait(&recv[size_t(r)], &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);  // else it arrived just now
    if (!cancelled) answered[size_t(r)] = answers_[size_t(r)].nonce == nonce;
  }
  answered_ = answered;
  return completed;
}

std::string Mpi::waited_text(const char* what, int partner, const Deadline& waited) const {
  std::ostringstream os;
  os << "rank " << rank_ << " waited " << int(waited.waited() + 0.5) << " s";
  if (step_ >= 0) os << " at step " << step_ + 1;
  os << " in " << what;
  if (partner >= 0)
    os << " with rank " << partner;
  else
    os << " for the other ranks";
  os << " (--collective-timeout " << timeout_s_ << ")";
  return os.str();
}

void Mpi::fail_timed_out(const char* what, int partner, const Deadline& waited) const {
  std::ostringstream os;
  os << "collective timeout: " << waited_text(what, partner, waited) << ". ";
  std::vector<std::string> silent, there;
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    const Answer& a = answers_[size_t(r)];
    if (!answered_[size_t(r)]) {
      silent.push_back(std::to_string(r));
      continue;
    }
    std::ostringstream w;
    w << "rank " << r << " is " << (a.in[0] ? std::string("waiting in ") + a.in : "working");
    if (a.step >= 0) w << " at step " << a.step + 1;
    if (a.alone && rank_ != 0) w << " (for rank 0, which works alone there)";
    there.push_back(w.str());
  }
  if (!silent.empty()) {
    os << (silent.size() == 1 ? "Rank " : "Ranks ");
    for (size_t i = 0; i < silent.size(); i++)
      os << (i ? (i + 1 < silent.size() ? ", " : " and ") : "") << silent[i];
    os << " did not answer within " << int(ask_s_ + 0.5) << " s: stopped, or stuck outside the "
       << "collectives (a hung file read, a stuck driver call). ";
  }
  for (const std::string& t : there) os << t << ". ";
  os << "The run stops here; its newest checkpoint is complete, and --resume continues from it";
  // The call's own requests stay posted: after this error the process calls nothing of MPI but
  // MPI_Abort (cli/main.cpp), so their buffers are never read again.
  throw UserError(os.str());
}

// ---- the calls ---------------------------------------------------------------------------

void Mpi::all_gather(const void* mine, size_t bytes, void* all) const {
  CHECK(bytes <= size_t(INT_MAX), "Mpi::all_gather: " << bytes << " bytes");
  MPI_Request q;
  mpi_check(MPI_Iallgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, MPI_COMM_WORLD,
                           &q),
            "MPI_Allgather");
  complete(&q, 1, "MPI_Allgather");
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
  MPI_Request q;
  mpi_check(MPI_Iallgatherv(mine.data(), int(n), MPI_CHAR, all.data(), counts.data(),
                            offsets.data(), MPI_CHAR, MPI_COMM_WORLD, &q),
            "MPI_Allgatherv");
  complete(&q, 1, "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int r = 0; r < size_; r++) out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(sizes[size_t(r)])));
  return out;
}

int64_t Mpi::sum(int64_t v) const {
  int64_t out = 0;
  MPI_Request q;
  mpi_check(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &q),
            "MPI_Allreduce");
  complete(&q, 1, "MPI_Allreduce");
  return out;
}

int64_t Mpi::max(int64_t v) const {
  int64_t out = 0;
  MPI_Request q;
  mpi_check(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &q),
            "MPI_Allreduce");
  complete(&q, 1, "MPI_Allreduce");
  return out;
}

void Mpi::bitwise_or(int32_t* flags, int64_t n) const {
  CHECK(n >= 0 && n <= INT_MAX, "Mpi::bitwise_or: " << n << " flags");
  MPI_Request q;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, flags, int(n), MPI_INT32_T, MPI_BOR, MPI_COMM_WORLD,
                           &q),
            "MPI_Allreduce");
  complete(&q, 1, "MPI_Allreduce");
}

void Mpi::send_receive(const void* out, size_t out_bytes, int to, void* in, size_t in_bytes,
                       int from) const {
  const char* o = static_cast<const char*>(out);
  char* i = static_cast<char*>(in);
  // Both sides cut the same sizes into the same pieces: the sender's out_bytes is the
  // receiver's in_bytes, so every piece has a partner.
  for (size_t done_o = 0, done_i = 0; done_o < out_bytes || done_i < in_bytes;) {
    const size_t no = std::min(kPiece, out_bytes - done_o), ni = std::min(kPiece, in_bytes - done_i);
    MPI_Request q[2];
    mpi_check(MPI_Irecv(i + done_i, int(ni), MPI_BYTE, ni ? from : MPI_PROC_NULL, 0,
                        MPI_COMM_WORLD, &q[0]),
              "MPI_Sendrecv");
    mpi_check(MPI_Isend(o + done_o, int(no), MPI_BYTE, no ? to : MPI_PROC_NULL, 0,
                        MPI_COMM_WORLD, &q[1]),
              "MPI_Sendrecv");
    // The rank it waits for: the one whose chunk it receives (its neighbour in the ring).
    complete(q, 2, "MPI_Sendrecv", ni ? from : to);
    done_o += no, done_i += ni;
  }
}

void Mpi::barrier() const {
  MPI_Request q;
  mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &q), "MPI_Barrier");
  complete(&q, 1, "MPI_Barrier");
}

void Mpi::broadcast(void* data, size_t bytes, int root) const {
  CHECK(bytes <= size_t(INT_MAX), "Mpi::broadcast: " << bytes << " bytes");
  MPI_Request q;
  mpi_check(MPI_Ibcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &q), "MPI_Bcast");
  complete(&q, 1, "MPI_Bcast");
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
