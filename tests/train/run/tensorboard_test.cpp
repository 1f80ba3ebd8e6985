// `cutrain train`'s TensorBoard event files read by TensorBoard itself (the PyPI package in
// .venv/, tests/train/run/tensorboard_client.py): every scalar series holds the values
// metrics.jsonl has for the same steps, after a clean run, after a kill -9 and --resume, and
// through a TensorBoard server's HTTP API. Skipped, saying why, without the client.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/tensorboard.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/report/report.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The project's virtual environment with TensorBoard (make deps); "" with the reason in `why`.
std::string tensorboard_python(std::string& why) {
  const fs::path py = repo_root() / ".venv" / "bin" / "python";
  if (!fs::exists(py)) {
    why = py.string() + " is missing: `make deps` makes it (TensorBoard from PyPI)";
    return "";
  }
  if (std::system(("'" + py.string() + "' -c 'import tensorboard' 2>/dev/null").c_str()) != 0) {
    why = py.string() + " lacks tensorboard: `make deps` could not install it (.venv/pip.log)";
    return "";
  }
  return py.string();
}

// The client's JSON answer: `mode` ("read" or "serve") of the run folder `run`, then `tags`.
json client(const std::string& python, const std::string& mode, const std::string& run,
            const fs::path& dir, const std::vector<std::string>& tags = {}) {
  const std::string out = (dir / (mode + ".json")).string();
  std::vector<std::string> all = {
      python, (repo_root() / "tests/train/run/tensorboard_client.py").string(), mode, run, out};
  all.insert(all.end(), tags.begin(), tags.end());
  const Ran r = run_process(all, (dir / (mode + ".log")).string());
  INFO("tensorboard_client.py " << mode << ": " << r.output);
  REQUIRE(r.status == 0);
  return json::parse(read_text(out));
}

// What TensorBoard must show for metrics.jsonl: (tag -> step -> value), read by the report's
// reader (parse_metrics: a "start" record at step S drops the earlier records after S, as a
// resume from S makes them obsolete), every value as float32 keeps it.
using Series = std::map<std::string, std::map<int64_t, double>>;
Series expected_series(const std::string& metrics) {
  const RunRecords run = parse_metrics(read_text(metrics));
  Series out;
  const auto put = [&](const std::string& tag, int64_t step, double v) {
    if (!std::isnan(v)) out[tag][step] = double(float(v));
  };
  int64_t previous = -1;  // the step of the record before: skipped steps are counted since it
  for (const MetricsStep& r : run.steps) {
    const int64_t s = r.step;
    put("train/loss", s, r.loss), put("train/top1", s, r.accuracy), put("train/lr", s, r.lr);
    put("speed/images_per_s", s, r.images_per_s), put("time/data_wait_pct", s, r.data_wait_pct);
    put("time/busy_pct", s, r.busy_pct), put("time/device_wait_pct", s, r.device_wait_pct);
    put("time/idle_pct", s, r.idle_pct);
    if (r.loss_scale > 0) put("train/loss_scale", s, r.loss_scale);
    int64_t skipped = 0;
    for (const MetricsSkip& k : run.skips)  // a skip's step counts from 0, a record's from 1
      skipped += k.step + 1 > previous && k.step + 1 <= s;
    put("train/skipped_steps", s, double(skipped));
    previous = s;
  }
  for (const MetricsEval& e : run.evals) {
    put("val/loss", e.step, e.loss), put("val/top1", e.step, e.top1);
    put("val/top5", e.step, e.top5), put("val_ema/loss", e.step, e.ema_loss);
    put("val_ema/top1", e.step, e.ema_top1), put("val_ema/top5", e.step, e.ema_top5);
    for (const ClassAccuracy& c : e.per_class) put("val_class_top1/" + c.name, e.step, c.top1);
  }
  return out;
}

Series shown_series(const json& scalars) {
  Series out;
  for (const auto& [tag, points] : scalars.items()) {
    std::set<int64_t> seen;
    for (const json& p : points) {
      const int64_t step = p[0];
      INFO(tag << " step " << step);
      REQUIRE(seen.insert(step).second);  // each step once per series
      out[tag][step] = p[1].get<double>();
    }
  }
  return out;
}

void require_same(const Series& shown, const Series& expected) {
  std::set<std::string> tags;
  for (const auto& [tag, v] : expected) tags.insert(tag);
  for (const auto& [tag, v] : shown) tags.insert(tag);
  for (const std::string& tag : tags) {
    INFO("series " << tag);
    REQUIRE(shown.count(tag));
    REQUIRE(expected.count(tag));
    REQUIRE(shown.at(tag) == expected.at(tag));
  }
}

// 10 steps an epoch of kTinyModel, a step record each, an evaluation each epoch.
std::vector<std::string> train_args(const fs::path& dir, const std::string& run, int epochs,
                                    int images = 320) {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  write_text((dir / "tiny.model").string(), kTinyModel);
  return {"train", "--train", fm.train, "--val", fm.test, "--limit-train",
          std::to_string(images), "--limit-val", "100", "--model", (dir / "tiny.model").string(),
          "--batch", "32", "--epochs", std::to_string(epochs), "--ema", "0.9", "--threads", "2",
          "--compute-threads", "1", "--log-every", "1", "--device", "cpu", "--out", run};
}

}  // namespace

TEST_CASE("tensorboard: TensorBoard reads every series metrics.jsonl has, and a server serves it") {
  std::string why;
  const std::string python = tensorboard_python(why);
  if (python.empty()) return skip(why);
  TempDir dir;
  const std::string run = (dir.path() / "run").string();
  const Ran r = run_cutrain(train_args(dir.path(), run, 2), (dir.path() / "train.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);

  const json got = client(python, "read", run, dir.path());
  const Series expected = expected_series(run + "/metrics.jsonl");
  REQUIRE(expected.at("train/loss").size() == 20);  // 2 epochs of 10 steps, a record each
  REQUIRE(expected.at("val_ema/top1").size() == 2);
  REQUIRE(expected.count("val_class_top1/Ankle boot"));
  require_same(shown_series(got["scalars"]), expected);
  // The configuration, as text at the first step.
  const json& config = got["texts"]["config"];
  REQUIRE(config.size() == 1);
  REQUIRE(config[0][0] == 0);
  REQUIRE(config[0][1].get<std::string>().find("\"ema\": 0.9") != std::string::npos);

  // The same through a TensorBoard server's HTTP API, on a loopback port.
  const json served = client(python, "serve", run, dir.path(),
                            {"train/loss", "val/top1", "val_class_top1/Ankle boot"});
  const Series s = shown_series(served);
  for (const auto& [tag, points] : s) {
    INFO("served " << tag);
    REQUIRE(points == expected.at(tag));
  }
  REQUIRE(s.size() == 3);
}

TEST_CASE("tensorboard: after a kill -9 and --resume, each step shows once, as metrics.jsonl") {
  std::string why;
  const std::string python = tensorboard_python(why);
  if (python.empty()) return skip(why);
  TempDir dir;
  const std::string run = (dir.path() / "run").string(), log = (dir.path() / "train.log").string();
  std::vector<std::string> args = train_args(dir.path(), run, 100);
  // Long enough (100 epochs of 10 steps) that it is still training when it is killed: once a
  // checkpoint (every 4 steps) is on disk and it has trained 2 steps past it, so that its event
  // files hold steps the resumed run trains again (and maybe a record cut short).
  args.insert(args.end(), {"--checkpoint-every", "4"});
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {cutrain_exe()};
  all.insert(all.end(), args.begin(), args.end());
  const pid_t pid = start_process(all, fd);
  ::close(fd);
  const auto past_a_checkpoint = [&] {  // from metrics.jsonl: its checkpoint and step records
    int64_t saved = -1, trained = -1;
    std::istringstream lines(read_text(run + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (r.is_discarded()) continue;  // a line being written
      if (r["kind"] == "checkpoint") saved = std::max(saved, r["step"].get<int64_t>());
      if (r["kind"] == "step") trained = r["step"];
    }
    return saved > 0 && trained >= saved + 2;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  bool far = false;
  while (!far && std::chrono::steady_clock::now() < deadline) {
    far = fs::exists(run + "/metrics.jsonl") && past_a_checkpoint();
    int status = 0;
    if (!far && ::waitpid(pid, &status, WNOHANG) == pid) break;  // ended: reported below
    if (!far) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  const int status = wait_process(pid);
  INFO("the killed run's output:\n" << read_text(log));
  REQUIRE(far);
  REQUIRE(status == 128 + SIGKILL);

  // Resumed from its newest checkpoint at step S, to the end of the epoch after S's.
  const int64_t S = read_checkpoint(newest_checkpoint(run)).step;
  REQUIRE(S >= 4);
  const int64_t epochs = S / 10 + 2;
  const Ran r = run_cutrain({"train", "--resume", run, "--log-every", "1", "--epochs",
                             std::to_string(epochs)},
                            (dir.path() / "resume.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);
  int files = 0;
  for (const auto& e : fs::directory_iterator(run))
    files += is_event_file(e.path().filename().string());
  REQUIRE(files == 2);  // one for each process

  const json got = client(python, "read", run, dir.path());
  const Series expected = expected_series(run + "/metrics.jsonl");
  REQUIRE(int64_t(expected.at("train/loss").size()) == 10 * epochs);  // every step once
  require_same(shown_series(got["scalars"]), expected);
}

TEST_CASE("tensorboard: --no-tensorboard writes no event file") {
  TempDir dir;
  const std::string run = (dir.path() / "run").string();
  std::vector<std::string> args = train_args(dir.path(), run, 1, 64);
  args.push_back("--no-tensorboard");
  const Ran r = run_cutrain(args, (dir.path() / "train.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);
  for (const auto& e : fs::directory_iterator(run))
    REQUIRE_FALSE(is_event_file(e.path().filename().string()));
}
