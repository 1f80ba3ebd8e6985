// mpirun: a run of N processes, one replica each (train/replicas/mpi.h), trains exactly as the
// in-process replicas of --devices cpu,... with the same global batch: the same loss at every
// step and the same checkpoint, bit for bit; rank 0 alone writes; a failure stops every rank.
// Real processes: OpenMPI's mpirun (make deps installs it) starting bin/cutrain, as a user does.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/sampler.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/replicas/mpi_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/replicas/mpi_gpu.h"

using namespace cutrain;
using namespace cutrain_test;


TEST_CASE("mpirun: 2 and 3 processes train exactly as --devices cpu,cpu(,cpu), and 2 with "
          "--sync-bn as --devices cpu,cpu --sync-bn: losses and checkpoints bit for bit; rank 0 "
          "alone writes") {
  if (no_mpirun()) return;
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const std::string model = tiny_model(dir);
  // 2 epochs of 4 steps of 48 (24 or 16 images a replica), AdamW, augmented, a validation
  // set: every collective (the buckets, the flags, the BatchNorm step sums) and rank 0's
  // evaluation and checkpoints. On the reference kernels (--conv/--linear direct): their bits do
  // not depend on the thread count, and mpirun gives each process fewer threads than the
  // in-process replicas have (oneDNN's would differ in the last bits; train/README.md).
  const std::vector<std::string> common = {
      "train", "--train", fm.train, "--limit-train", "200", "--val", fm.test, "--limit-val", "100",
      "--model", model, "--batch", "48", "--epochs", "2", "--optimizer", "adamw",
      "--lr", "0.003", "--augment", "--seed", "5", "--device", "cpu", "--threads", "1",
      "--checkpoint-every", "3", "--keep", "10", "--log-every", "1", "--conv", "direct",
      "--linear", "direct"};
  for (const auto& [n, sync_bn] : {std::pair{2, false}, std::pair{3, false}, std::pair{2, true}}) {
    INFO(n << " processes" << (sync_bn ? ", --sync-bn" : ""));
    const std::string name = std::to_string(n) + (sync_bn ? "s" : "");
    const std::string a = dir / ("mpi" + name), b = dir / ("threads" + name);
    std::vector<std::string> args = common;
    if (sync_bn) args.push_back("--sync-bn");
    args.insert(args.end(), {"--out", a});
    const Ran ran = run_mpirun(n, args, (dir / "mpi.log"));
    INFO(ran.output);
    REQUIRE(ran.status == 0);
    REQUIRE(ran.output.find(std::to_string(n) + " replicas (mpirun: one per process)") !=
            std::string::npos);
    REQUIRE((ran.output.find("BatchNorm synchronised over the replicas") != std::string::npos) ==
            sync_bn);
    // Rank 0 alone printed: one final line, one configuration.
    REQUIRE(ran.output.find("trained 8 steps") == ran.output.rfind("trained 8 steps"));
    REQUIRE(ran.output.find("configuration (saved as") ==
            ran.output.rfind("configuration (saved as"));

    std::string devices = "cpu";
    for (int i = 1; i < n; i++) devices += ",cpu";
    args = common;
    if (sync_bn) args.push_back("--sync-bn");
    args.insert(args.end(), {"--devices", devices, "--out", b});
    const Ran local = run_cutrain(args, (dir / "local.log"));
    INFO(local.output);
    REQUIRE(local.status == 0);

    // --sync-bn's share of the time: on the progress lines and in the step records.
    for (const Ran* r : {&ran, &local})
      REQUIRE((r->output.find("  sync-bn ") != std::string::npos) == sync_bn);
    std::stringstream records;
    records << std::ifstream(a + "/metrics.jsonl").rdbuf();
    REQUIRE((records.str().find("\"sync_bn_pct\":") != std::string::npos) == sync_bn);
    const std::vector<std::string> la = step_losses(a + "/metrics.jsonl");
    REQUIRE(la.size() == 8);  // one record a step: no rank but 0 wrote any
    REQUIRE(la == step_losses(b + "/metrics.jsonl"));
    for (const char* file : {"/step-00000003.h5", "/step-00000006.h5", "/step-00000008.h5"}) {
      INFO(file);
      require_same_state(read_checkpoint(a + file), read_checkpoint(b + file));
    }
    REQUIRE(std::filesystem::exists(a + "/best.h5"));
    // The final evaluation, on rank 0: the model of the in-process run, so the same numbers.
    auto final_line = [](const std::string& out) {
      const size_t f = out.find("final: loss");
      return f == std::string::npos ? std::string() : out.substr(f, out.find('(', f) - f);
    };
    REQUIRE(!final_line(ran.output).empty());
    REQUIRE(final_line(ran.output) == final_line(local.output));
  }
}

TEST_CASE("mpirun: a run of 2 processes resumes on 3 from the global data cursor, as the "
          "in-process replicas do") {
  if (no_mpirun()) return;
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const std::string model = tiny_model(dir);
  const std::vector<std::string> common = {
      "train", "--train", fm.train, "--limit-train", "200", "--model", model, "--batch", "48",
      "--seed", "9", "--device", "cpu", "--threads", "1", "--log-every", "1",
      "--conv", "direct", "--linear", "direct"};  // bit for bit on any thread count (above)
  const std::string a = dir / "mpi", b = dir / "threads";
  // Epoch 1 on 2 replicas, then epoch 2 on 3: processes (a) and threads (b).
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  Ran r = run_mpirun(2, with({"--epochs", "1", "--out", a}), dir / "a1.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  r = run_mpirun(3, with({"--epochs", "2", "--resume", a}), dir / "a2.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("resuming from") != std::string::npos);
  r = run_cutrain(with({"--epochs", "1", "--devices", "cpu,cpu", "--out", b}), dir / "b1.log");
  REQUIRE(r.status == 0);
  r = run_cutrain(with({"--epochs", "2", "--devices", "cpu,cpu,cpu", "--resume", b}),
                  dir / "b2.log");
  REQUIRE(r.status == 0);
  const std::vector<std::string> la = step_losses(a + "/metrics.jsonl");
  REQUIRE(la.size() == 8);  // steps 1-4 on 2 ranks, 5-8 on 3: each step once
  REQUIRE(la == step_losses(b + "/metrics.jsonl"));
  require_same_state(read_checkpoint(a + "/step-00000008.h5"),
                     read_checkpoint(b + "/step-00000008.h5"));
}

namespace {

// mpirun started with its output on a pipe, read line by line as the run goes.
struct Launched {
  pid_t pid = -1;
  FILE* out = nullptr;  // the read end: mpirun's stdout and stderr
  std::string seen;     // everything read so far

  // Reads until a line contains `text` (true) or the output ends (false).
  bool read_until(const std::string& text) {
    char line[4096];
    while (std::fgets(line, sizeof line, out)) {
      seen += line;
      if (std::string(line).find(text) != std::string::npos) return true;
    }
    return false;
  }
  // Reads to the end, then waits for mpirun: its exit status (128 + signal when killed).
  int finish() {
    read_until("\x01never printed\x01");
    std::fclose(out);
    return wait_process(pid);
  }
};

Launched launch_mpirun(int np, const std::vector<std::string>& args) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  Launched l;
  l.pid = start_process(mpirun_argv(np, args), fds[1], kMpirunEnv);
  ::close(fds[1]);  // the child's copy is its output; EOF once mpirun and its ranks are gone
  l.out = ::fdopen(fds[0], "r");
  return l;
}

// The process mpirun started as `rank` (its child whose environment says so), or -1.
pid_t rank_pid(pid_t mpirun, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (!(stat >> pid >> comm >> state >> ppid) || ppid != mpirun) continue;
    const std::string env = read_text((e.path() / "environ").string());
    for (size_t b = 0; b < env.size();) {
      const size_t end = env.find('\0', b);
      if (env.compare(b, end - b, want) == 0) return pid_t(std::stol(name));
      if (end == std::string::npos) break;
      b = end + 1;
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("mpirun: a rank killed outright stops the run, naming the rank; the newest "
          "checkpoint is intact and the run resumes") {
  if (no_mpirun()) return;
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const std::string out = dir / "run";
  const std::vector<std::string> common = {
      "train", "--train", fm.train, "--limit-train", "200", "--model", tiny_model(dir),
      "--batch", "48", "--seed", "2", "--device", "cpu", "--threads", "1", "--log-every", "1",
      "--checkpoint-every", "2", "--epochs", "12"};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--out", out});
  Launched run = launch_mpirun(2, args);
  // Step 11's line comes after step 10's checkpoint was handed to the writer, which waited
  // for the writer to take step 8's, which it took after writing step 6's: a complete one.
  REQUIRE(run.read_until("step 11/"));
  const pid_t victim = rank_pid(run.pid, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  const int status = run.finish();  // mpirun stops rank 0 too: no hang
  INFO(run.seen);
  REQUIRE(status != 0);
  REQUIRE(run.seen.find("rank 1") != std::string::npos);  // mpirun names the rank
  const std::string newest = newest_checkpoint(out);
  REQUIRE(!newest.empty());
  const Checkpoint c = read_checkpoint(newest);  // complete and readable
  REQUIRE(c.step >= 6);
  // The run goes on from there to its end.
  args = common;
  args.insert(args.end(), {"--resume", out});
  const Ran resumed = run_mpirun(2, args, dir / "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  REQUIRE(resumed.output.find("resuming from") != std::string::npos);
  REQUIRE(resumed.output.find("trained " + std::to_string(48 - c.step) + " steps") !=
          std::string::npos);
}

TEST_CASE("mpirun: each rank reads only its shard: in an epoch every file is read by exactly one "
          "rank, bad ones included; rank 0 names every rank's bad files; a trace per rank") {
  if (no_mpirun()) return;
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  // 90 real images and 6 files that are not images, 96 in all: two full batches of 48, so
  // one epoch reads every line once (nothing is dropped).
  std::ifstream train(fm.train);
  std::string list;
  std::vector<std::string> bad;
  for (int i = 0; i < 96; i++) {
    if (i % 16 == 7) {
      bad.push_back(dir / ("bad" + std::to_string(i) + ".jpg"));
      std::ofstream(bad.back()) << "not an image";
      list += bad.back() + "\t3\n";
      continue;
    }
    std::string line;
    REQUIRE(std::getline(train, line));
    list += fm.dir + "/" + line + "\n";
  }
  write_text(dir / "list.txt", list);
  for (const int n : {2, 3}) {
    INFO(n << " processes");
    const std::string out = dir / ("run" + std::to_string(n));
    const Ran r = run_mpirun(n,
                             {"train", "--train", dir / "list.txt", "--model", tiny_model(dir),
                              "--batch", "48", "--epochs", "1", "--seed", "1", "--device",
                              "cpu", "--threads", "1", "--out", out, "--trace",
                              out + "/trace.json"},
                             dir / "run.log");
    INFO(r.output);
    REQUIRE(r.status == 0);
    // Rank 0's report names each bad file once, whichever rank read it (the others' loaders
    // name none themselves), and counts them.
    for (const std::string& b : bad) {
      INFO(b);
      const size_t at = r.output.find(b + ": not an image");
      REQUIRE(at != std::string::npos);
      REQUIRE(r.output.find(b + ": not an image", at + 1) == std::string::npos);
    }
    REQUIRE(r.output.find("found by rank 1: ") != std::string::npos);
    REQUIRE(r.output.find("bad files: 6 skipped, listed in " + out + "/bad_files.replica<rank>.txt") !=
          std::string::npos);
    // --trace: one file per rank, named by rank, each with its rank's main thread.
    for (int rank = 0; rank < n; rank++) {
      const std::string trace = read_text(out + "/trace.rank" + std::to_string(rank) + ".json");
      REQUIRE(trace.find("\"traceEvents\"") != std::string::npos);
      REQUIRE(trace.find("rank " + std::to_string(rank) + " main") != std::string::npos);
    }
    // What each rank's sampler gives it (data/sampler.h, as the trainer configures it): in
    // epoch 0 the ranks' shards are a partition of the 96 lines. Before the run ends its
    // loader may also read ahead, up to a ring of batch slots (LoaderConfig::ring) past the
    // last step, into the next epochs' shards.
    const int64_t ahead = 1 + (LoaderConfig{}.ring + 1) / 2;  // epochs of 2 batches
    std::vector<std::set<int64_t>> epoch0(static_cast<size_t>(n)), later(static_cast<size_t>(n));
    for (int rank = 0; rank < n; rank++) {
      SamplerConfig sc;
      sc.num_samples = 96, sc.batch_size = 48, sc.seed = 1, sc.shuffle = true;
      sc.last_batch = LastBatch::drop, sc.replicas = n, sc.rank = rank;
      const Sampler sampler(sc);
      REQUIRE(sampler.batches_per_epoch() == 2);
      for (int64_t b = 0; b < 2; b++) {
        for (int64_t i : sampler.batch(0, b)) epoch0[size_t(rank)].insert(i);
        for (int64_t e = 1; e <= ahead; e++)
          for (int64_t i : sampler.batch(e, b)) later[size_t(rank)].insert(i);
      }
    }
    std::vector<int> owners(96, 0);
    for (const auto& shard : epoch0)
      for (int64_t i : shard) owners[size_t(i)]++;
    REQUIRE(std::count(owners.begin(), owners.end(), 1) == 96);  // each line, one rank
    // Each rank lists the bad files it read (bad_files.replicaR.txt): every bad file by the
    // rank whose epoch-0 shard holds it, and none outside the rank's own shards (so no rank
    // reads another's part).
    for (size_t k = 0; k < bad.size(); k++) {
      const int64_t line = int64_t(k) * 16 + 7;
      for (int rank = 0; rank < n; rank++) {
        INFO("bad file " << bad[k] << " (line " << line << "), rank " << rank);
        const std::string listed =
            read_text(out + "/bad_files.replica" + std::to_string(rank) + ".txt");
        const bool read = listed.find(bad[k] + "\t") != std::string::npos;
        if (epoch0[size_t(rank)].count(line)) REQUIRE(read);
        if (read) REQUIRE((epoch0[size_t(rank)].count(line) || later[size_t(rank)].count(line)));
      }
    }
  }
}

TEST_CASE("mpirun: a rank that cannot start stops every rank, with its reason") {
  if (no_mpirun()) return;
  TempDir dir;
  // A missing list: every rank fails before any collective, each says why, and mpirun ends.
  Ran r = run_mpirun(2, {"train", "--train", (dir / "missing.txt"), "--out",
                         (dir / "run")},
                     (dir / "a.log"));
  REQUIRE(r.status != 0);
  REQUIRE(r.output.find("missing.txt") != std::string::npos);
  REQUIRE(r.output.find("stopping every rank") != std::string::npos);
  // One replica per process: --devices with several entries is refused, naming what to do.
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  r = run_mpirun(2, {"train", "--train", fm.train, "--limit-train", "64", "--batch", "32",
                     "--devices", "cpu,cpu", "--out", (dir / "run2")},
                 (dir / "b.log"));
  REQUIRE(r.status != 0);
  REQUIRE(r.output.find("each process is one replica") != std::string::npos);
  // A batch that does not split evenly over the processes and --accum is refused, by name.
  r = run_mpirun(3, {"train", "--train", fm.train, "--limit-train", "64", "--batch", "4",
                     "--accum", "2", "--device", "cpu", "--out", (dir / "run3")},
                 (dir / "c.log"));
  REQUIRE(r.status != 0);
  REQUIRE(r.output.find("--batch 4 is not divisible by the 3 processes of mpirun times --accum 2") !=
          std::string::npos);
}

TEST_CASE("mpirun on GPUs: NCCL when every rank has a GPU of its own and NCCL loads, else the "
          "host-staged MPI ring, saying why") {
  // places: "machine/PCI bus id" of each rank's GPU (train/replicas/mpi_gpu.h).
  const std::vector<std::string> two_gpus = {"node1/0000:3B:00.0", "node1/0000:5E:00.0"};
  const std::vector<std::string> two_nodes = {"node1/0000:3B:00.0", "node2/0000:3B:00.0"};
  const std::vector<std::string> shared = {"node1/0000:3B:00.0", "node1/0000:5E:00.0",
                                           "node1/0000:3B:00.0"};
  for (const auto& places : {two_gpus, two_nodes}) {
    const GpuTransport t = choose_gpu_transport(places, "", false);
    REQUIRE(t.nccl);
    REQUIRE(t.why.empty());
      }
  // Two ranks on one GPU: NCCL refuses that; the MPI ring through the host does not.
  GpuTransport t = choose_gpu_transport(shared, "", false);
  REQUIRE(!t.nccl);
  REQUIRE(t.why == "ranks 0 and 2 share GPU node1/0000:3B:00.0, and NCCL needs a GPU per rank");
  // No NCCL (the build, or the library on some rank): the reason is passed on.
  t = choose_gpu_transport(two_gpus, "NCCL could not be loaded: libnccl.so.2: cannot open", false);
  REQUIRE(!t.nccl);
  REQUIRE(t.why == "NCCL could not be loaded: libnccl.so.2: cannot open");
  // CUTRAIN_NCCL=0 (on any rank) asks for the host-staged ring whatever else holds.
  t = choose_gpu_transport(two_gpus, "", true);
  REQUIRE(!t.nccl);
  REQUIRE(t.why == "CUTRAIN_NCCL=0");
}
