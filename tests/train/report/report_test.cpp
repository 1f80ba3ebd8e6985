// The run report (train/report/report.h): the builder on records made by hand (a resume from an
// earlier checkpoint, nulls, skipped steps, no validation, one epoch, thousands of records),
// its drawing helpers, its refusals; then a real `cutrain train` process writing
// RUN/report.html, `cutrain report` writing it again, and a run whose report cannot be written
// training on regardless. tests/train/report/report_browser_test.cpp renders the page in Chromium.
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/report/report_fixture.h"
#include "train/report/report.h"
#include "train/report/report_svg.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// A page loads nothing from elsewhere and runs nothing.
void require_self_contained(const std::string& html) {
  REQUIRE(html.find("http://") == std::string::npos);
  REQUIRE(html.find("https://") == std::string::npos);
  REQUIRE(html.find("<script") == std::string::npos);
  REQUIRE(html.find("<link") == std::string::npos);
  REQUIRE(html.find("src=") == std::string::npos);
  REQUIRE(html.find("@import") == std::string::npos);
}

std::string step_line(int64_t step, int epoch, const std::string& loss, double time,
                      double scale = 65536) {
  return "{\"kind\":\"step\",\"step\":" + std::to_string(step) + ",\"epoch\":" +
         std::to_string(epoch) + ",\"loss\":" + loss + ",\"accuracy\":0.5,\"lr\":0.1,"
         "\"loss_scale\":" + std::to_string(scale) + ",\"images_per_s\":1000,"
         "\"data_wait_pct\":20,\"time\":" + std::to_string(time) + "}\n";
}

std::string start_line(int64_t step) {
  return "{\"kind\":\"start\",\"step\":" + std::to_string(step) + ",\"total_steps\":6,"
         "\"steps_per_epoch\":3,\"epochs\":2,\"device\":\"cpu fp32\"}\n";
}

// An eval record of 3 classes: (a, b, c) the diagonal of its confusion matrix, 10 images each.
std::string eval_line(int epoch, int64_t step, double time, int a, int b, int c) {
  return "{\"kind\":\"eval\",\"epoch\":" + std::to_string(epoch) + ",\"step\":" +
         std::to_string(step) + ",\"loss\":0.7,\"top1\":" + std::to_string((a + b + c) / 30.0) +
         ",\"top5\":1,\"images\":30,\"bad_files\":0,\"time\":" + std::to_string(time) +
         ",\"per_class\":[{\"class\":\"cat\",\"images\":10,\"top1\":" + std::to_string(a / 10.0) +
         "},{\"class\":\"dog\",\"images\":10,\"top1\":" + std::to_string(b / 10.0) +
         "},{\"class\":\"eel\",\"images\":10,\"top1\":" + std::to_string(c / 10.0) +
         "}],\"confusion\":[[" + std::to_string(a) + "," + std::to_string(10 - a) + ",0],[" +
         std::to_string(10 - b) + "," + std::to_string(b) + ",0],[0," + std::to_string(10 - c) +
         "," + std::to_string(c) + "]]}\n";
}

// Whether printf's "nan" or "inf" (as a word: "inf/NaN gradient" is prose) is in the text.
bool prints_non_finite(const std::string& text) {
  for (const std::string word : {"nan", "inf"})
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
      const char before = at ? text[at - 1] : ' ';
      const char after = at + 3 < text.size() ? text[at + 3] : ' ';
      if (!std::isalpha(static_cast<unsigned char>(before)) &&
          !std::isalpha(static_cast<unsigned char>(after)) && after != '/')
        return true;
    }
  return false;
}

ReportInput hand_made(const std::string& metrics) {
  ReportInput in;
  in.title = "hand-made";
  in.records = parse_metrics(metrics);
  in.config = {{"train", "data/train.txt"}, {"model", "tiny"}, {"epochs", "2"}, {"batch", "32"},
               {"note", "<script>alert(1)</script> & \"quotes\""}};
  in.metrics_name = "metrics.jsonl";
  return in;
}

}  // namespace

TEST_CASE("report: a resume from an earlier checkpoint replaces the records after it") {
  // Process 1 trains steps 1-5 (step 2's loss overflowed: null; step 2 skipped), evaluates
  // epoch 1 at step 3, and is lost after step 5. Process 2 resumes from step 3's checkpoint.
  const std::string text =
      start_line(0) + step_line(1, 1, "2.0", 1) + step_line(2, 1, "null", 2) +
      "{\"kind\":\"skip\",\"step\":2,\"parameter\":\"conv3.w\",\"loss_scale\":32768}\n" +
      step_line(3, 1, "1.0", 3) + eval_line(1, 3, 3.5, 5, 6, 7) + step_line(4, 2, "0.9", 4) +
      step_line(5, 2, "0.8", 5) + eval_line(2, 5, 5.5, 1, 1, 1) +  // a run that went further
      start_line(3) + step_line(4, 2, "0.7", 1) + step_line(5, 2, "0.6", 2) +
      step_line(6, 2, "0.5", 3) + eval_line(2, 6, 3.2, 8, 9, 10) + "{\"kind\":\"st";  // torn
  const RunRecords r = parse_metrics(text);
  REQUIRE(r.starts.size() == 2);
  REQUIRE(r.unreadable == 1);
  REQUIRE(r.steps.size() == 6);
  for (size_t i = 0; i < 6; i++) REQUIRE(r.steps[i].step == int64_t(i) + 1);
  REQUIRE(std::isnan(r.steps[1].loss));  // null: NaN, not 0
  REQUIRE(r.steps[3].loss == 0.7);       // step 4: the resumed process's record
  REQUIRE(r.steps[4].loss == 0.6);
  REQUIRE(r.skips.size() == 1);
  REQUIRE(r.skips[0].parameter == "conv3.w");
  REQUIRE(r.evals.size() == 2);
  REQUIRE(r.evals[1].step == 6);  // the abandoned evaluation at step 5 is gone
  REQUIRE(r.evals[1].confusion == std::vector<int64_t>{8, 2, 0, 1, 9, 0, 0, 0, 10});
  REQUIRE(std::fabs(r.wall_s - (5.5 + 3.2)) < 1e-9);  // each process's last time, summed

  // Without start records (an older file) a step recorded twice keeps its last record, and a
  // clock that goes back starts a new process.
  const RunRecords old = parse_metrics(step_line(1, 1, "3", 1) + step_line(2, 1, "2", 2) +
                                       step_line(2, 1, "1.5", 0.5) + step_line(3, 1, "1", 1));
  REQUIRE(old.steps.size() == 3);
  REQUIRE(old.steps[1].loss == 1.5);
  REQUIRE(std::fabs(old.wall_s - 3) < 1e-9);
}

TEST_CASE("report: per-epoch training values weigh each record by the steps it covers") {
  // Epoch 1: steps 1-2 at loss 1 (one record), step 3 at loss 4: (2 * 1 + 1 * 4) / 3 = 2.
  // Epoch 2: a null loss does not count; the finite record is the mean.
  const RunRecords r = parse_metrics(step_line(2, 1, "1", 1) + step_line(3, 1, "4", 2) +
                                     step_line(5, 2, "null", 3) + step_line(6, 2, "0.5", 4));
  const std::vector<EpochTrain> e = train_epochs(r);
  REQUIRE(e.size() == 2);
  REQUIRE(e[0].epoch == 1);
  REQUIRE(e[0].last_step == 3);
  REQUIRE(std::fabs(e[0].loss - 2.0) < 1e-12);
  REQUIRE(e[1].last_step == 6);
  REQUIRE(e[1].loss == 0.5);
  REQUIRE(e[1].accuracy == 0.5);
}

TEST_CASE("report: the header names the bound from the device's clock; older records show the host's wait") {
  // Epoch 2's records (the steady state): busy 60/70/80, waits for batches 30/20/10: the
  // medians (70, 20, idle 10) are loader-bound by data/metrics.h's rule.
  auto clocked = [](int64_t step, double busy, double wait, double ratio) {
    std::string line = step_line(step, 2, "1", double(step));
    line.insert(line.rfind(",\"time\""),
                ",\"busy_pct\":" + std::to_string(busy) + ",\"device_wait_pct\":" +
                    std::to_string(wait) + ",\"idle_pct\":10,\"bound\":\"loader\","
                    "\"pipeline_ratio\":" + std::to_string(ratio));
    return line;
  };
  const std::string text = step_line(1, 1, "2", 1) + clocked(2, 60, 30, 1.2) +
                           clocked(3, 70, 20, 1.1) + clocked(4, 80, 10, 1.05);
  const RunRecords r = parse_metrics(text);
  REQUIRE(std::isnan(r.steps[0].busy_pct));  // no clock in the record: NaN, not 0
  REQUIRE(r.steps[2].busy_pct == 70);
  REQUIRE(r.steps[2].pipeline_ratio == 1.1);
  const std::string html = report_html(hand_made(text));
  REQUIRE(html.find("<div class=\"k\">loader-bound</div><div class=\"v\">busy 70%</div>") !=
          std::string::npos);
  REQUIRE(html.find("pipeline ratio 1.10 &middot; waits for data 20.0%") != std::string::npos);
  REQUIRE(html.find("device waits for a batch") != std::string::npos);  // the chart's series
  // Records from before the device's clock: the host's data wait alone, and no bound.
  const std::string old = report_html(hand_made(step_line(1, 1, "2", 1) + step_line(2, 1, "1", 2)));
  REQUIRE(old.find("<div class=\"k\">data wait</div><div class=\"v\">20.0%</div>") !=
          std::string::npos);
  REQUIRE(old.find("-bound</div>") == std::string::npos);
  REQUIRE(old.find("no device clock") != std::string::npos);
}

TEST_CASE("report: a run without validation, with a null loss and a skipped step") {
  const std::string text =
      start_line(0) + step_line(1, 1, "2.0", 1) + step_line(2, 1, "null", 2) +
      "{\"kind\":\"skip\",\"step\":2,\"parameter\":\"conv3.w\",\"loss_scale\":32768}\n" +
      step_line(3, 1, "1.0", 3) + step_line(4, 2, "0.9", 4) + step_line(5, 2, "0.8", 5) +
      step_line(6, 2, "0.7", 6);
  const std::string html = report_html(hand_made(text));
  require_self_contained(html);
  REQUIRE(count_of(html, "<svg") == 6);  // loss, accuracy, lr, loss scale, images/s, data wait
  REQUIRE(html.find("no validation data") != std::string::npos);
  REQUIRE(html.find("color:#ea580c") == std::string::npos);  // no validation series in a legend
  REQUIRE(html.find("val loss,") == std::string::npos);          // ... nor points
  REQUIRE(html.find("Per class") == std::string::npos);
  REQUIRE(html.find("Skipped steps (1)") != std::string::npos);
  REQUIRE(html.find("<code>conv3.w</code>") != std::string::npos);
  REQUIRE(html.find("step 2 skipped: inf/NaN gradient in conv3.w") != std::string::npos);
  REQUIRE(html.find("2 / 2") != std::string::npos);  // epochs: 6 steps of 3
  // The null is a gap, never a number: nothing prints as printf's nan or inf.
  REQUIRE(!prints_non_finite(html));
  // Hover titles on the points; the config's text escaped, not markup.
  REQUIRE(html.find("<title>train loss (step record), step 5: 0.8</title>") != std::string::npos);
  REQUIRE(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;") !=
          std::string::npos);
}

TEST_CASE("report: one epoch with validation: single points, per class, the confusion matrix") {
  const std::string text =
      start_line(0) + step_line(3, 1, "1.2", 1) + eval_line(1, 3, 1.5, 9, 4, 7);
  ReportInput in = hand_made(text);
  in.class_names = {"cat", "dog", "eel"};
  in.checkpoints = {{"step-00000003.h5", "step-00000003.h5", "1.0 kB, the best"},
                    {"best.h5", "best.h5", "1.0 kB, the best validation top-1: step-00000003.h5"}};
  const std::string html = report_html(in);
  require_self_contained(html);
  REQUIRE(count_of(html, "<svg") == 8);  // the 6 charts, per class, the confusion matrix
  REQUIRE(html.find("no validation data") == std::string::npos);
  REQUIRE(html.find("<title>val top-1, epoch 1 (step 3): 66.67%</title>") != std::string::npos);
  REQUIRE(html.find("Per-class accuracy") != std::string::npos);
  REQUIRE(html.find("40.0%  worst") != std::string::npos);  // dog: 4 of 10
  REQUIRE(html.find("Confusion matrix") != std::string::npos);
  REQUIRE(html.find("<title>true dog, predicted cat: 6 (60.0% of the row)</title>") !=
          std::string::npos);
  REQUIRE(count_of(html, "<rect") >= 3 + 9);  // 3 bars, 9 cells
  REQUIRE(html.find("<a href=\"best.h5\">best.h5</a><span class=\"best\">best</span>") !=
          std::string::npos);
  REQUIRE(html.find("66.67%") != std::string::npos);  // the header's best top-1
}

TEST_CASE("report: thousands of step records are drawn as at most 600 points a series") {
  std::string text = start_line(0);
  for (int s = 1; s <= 5000; s++)
    text += step_line(s, 1 + (s - 1) / 1000, s == 2500 ? "9.5" : std::to_string(1.0 / s), s);
  const std::string html = report_html(hand_made(text));
  REQUIRE(html.size() < 400 * 1000);
  REQUIRE(count_of(html, "<circle") <= 6 * 200);  // hover targets: at most 200 a line

  std::vector<ChartPoint> p;
  for (int i = 0; i < 10000; i++) p.push_back({double(i), std::sin(i * 0.01)});
  p[4321].y = 7, p[8765].y = -7, p[5000].y = NAN;
  const std::vector<ChartPoint> d = downsample(p, 600);
  REQUIRE(d.size() <= 601);  // 600 and the one gap
  REQUIRE(d.front().x == 0);
  REQUIRE(d.back().x == 9999);
  bool high = false, low = false, gap = false;
  for (const ChartPoint& q : d)
    high |= q.y == 7, low |= q.y == -7, gap |= std::isnan(q.y);
  REQUIRE(high);
  REQUIRE(low);
  REQUIRE(gap);
  for (size_t i = 1; i < d.size(); i++) REQUIRE(d[i].x >= d[i - 1].x);
  REQUIRE(downsample({{1, 2}, {3, 4}}, 600).size() == 2);
}

TEST_CASE("report: nice ticks and escaping") {
  double step = 0;
  require_near(nice_ticks(0.13, 0.87, 5, &step), {0, 0.2, 0.4, 0.6, 0.8, 1}, 1e-12);
  REQUIRE(step == 0.2);
  const std::vector<double> t = nice_ticks(0, 1410, 6, &step);
  REQUIRE(step == 500);
  REQUIRE(t.front() == 0);
  REQUIRE(t.back() == 1500);
  REQUIRE(html_escape("a<b & \"c\" 'd'") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;");
  REQUIRE(html_escape("bad \xff byte") == "bad \\xff byte");  // kernels/printable.h's escape
  REQUIRE(html_escape("a\x1b[2Jb\u202e") == "a\\x1b[2Jb\\u202e");
}

TEST_CASE("report: a folder without a run, config.json or metrics records is refused clearly") {
  TempDir dir;
  REQUIRE_USER_ERROR(write_report(dir / "none"), "is not a run folder");
  REQUIRE_USER_ERROR(write_report(dir.str()), "has no config.json");
  write_text(dir / "config.json", "{\"epochs\": 2}");
  REQUIRE_USER_ERROR(write_report(dir.str()), "no metrics file");
  write_text(dir / "metrics.jsonl", "");
  REQUIRE_USER_ERROR(write_report(dir.str()), "no metrics records yet");
  REQUIRE(!std::filesystem::exists(dir / "report.html"));
  const Ran r = run_cutrain({"report", dir.str()}, dir / "log");
  REQUIRE(r.status == 2);
  REQUIRE(r.output.find("no metrics records yet") != std::string::npos);
}

TEST_CASE("report: cutrain train writes RUN/report.html, cutrain report writes it again") {
  const ReportedRun& run = reported_run();
  INFO(run.train.output);
  REQUIRE(run.train.status == 0);
  const std::string page = run.dir + "/report.html";
  REQUIRE(run.train.output.find("report: " + page) != std::string::npos);

  // The eval records hold the confusion matrix: each row sums to its class's images.
  std::ifstream metrics(run.dir + "/metrics.jsonl");
  int evals = 0, starts = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    starts += j["kind"] == "start";
    if (j["kind"] != "eval") continue;
    evals++;
    REQUIRE(j["bad_files"] == 0);
    REQUIRE(j["confusion"].size() == 10);
    for (size_t y = 0; y < 10; y++) {
      int64_t row = 0;
      for (const auto& n : j["confusion"][y]) row += n.get<int64_t>();
      REQUIRE(row == j["per_class"][y]["images"].get<int64_t>());
    }
  }
  REQUIRE(evals == 2);
  REQUIRE(starts == 1);
  // --trace was given relative to the working folder: config.json holds it absolute, so that
  // `cutrain report` finds it from anywhere.
  const std::string trace = nlohmann::json::parse(read_text(run.dir + "/config.json"))["trace"];
  REQUIRE(std::filesystem::path(trace).is_absolute());
  REQUIRE(std::filesystem::equivalent(trace, std::filesystem::path(run.dir).parent_path() /
                                                 "trace.json"));

  // to_run: the run folder from the page's folder; the trace is beside the run folder.
  auto require_page = [&](const std::string& html, const std::string& to_run,
                          const std::string& trace_href) {
    require_self_contained(html);
    REQUIRE(count_of(html, "<svg") == 8);
    REQUIRE(html.find("<h1>run</h1>") != std::string::npos);
    REQUIRE(html.find("2 / 2") != std::string::npos);         // epochs
    REQUIRE(html.find("cpu fp32") != std::string::npos);      // the device, from "start"
    REQUIRE(html.find("-bound</div>") != std::string::npos);  // the bound, from the clock
    REQUIRE(html.find("pipeline ratio ") != std::string::npos);
    REQUIRE(html.find("Per-class accuracy") != std::string::npos);
    REQUIRE(html.find("Confusion matrix") != std::string::npos);
    REQUIRE(html.find("Ankle boot") != std::string::npos);    // the class names
    REQUIRE(html.find("tiny.model") != std::string::npos);    // the configuration
    REQUIRE(html.find("<td>log_every</td><td>2</td>") != std::string::npos);
    REQUIRE(html.find("not-an-image.jpg") != std::string::npos);  // the bad training file
    REQUIRE(html.find("Bad files (1)") != std::string::npos);
    // Links relative to the page: every checkpoint, best.h5 marked, the trace.
    REQUIRE(html.find("<a href=\"" + to_run + "best.h5\">best.h5</a><span class=\"best\">best"
                      "</span>") != std::string::npos);
    REQUIRE(count_of(html, "<span class=\"best\">best</span>") == 2);  // and the step file it is
    REQUIRE(html.find("<a href=\"" + to_run + "step-00000010.h5\">") != std::string::npos);
    REQUIRE(html.find("<a href=\"" + to_run + "step-00000020.h5\">") != std::string::npos);
    REQUIRE(html.find("<a href=\"" + trace_href + "\">trace.json</a>") != std::string::npos);
    REQUIRE(html.find("<a href=\"" + to_run + "metrics.jsonl\">") != std::string::npos);
  };
  require_page(read_text(page), "", "../trace.json");

  std::filesystem::remove(page);
  Ran r = run_cutrain({"report", run.dir}, run.dir + "/../report.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output == page + "\n");
  require_page(read_text(page), "", "../trace.json");

  // --out elsewhere: the links lead back to the run.
  const std::string other = std::filesystem::path(run.dir).parent_path() / "elsewhere" / "r.html";
  std::filesystem::create_directories(std::filesystem::path(other).parent_path());
  r = run_cutrain({"report", run.dir, "--out", other}, run.dir + "/../report.log");
  REQUIRE(r.status == 0);
  require_page(read_text(other), "../run/", "../trace.json");
}

TEST_CASE("report: a report that cannot be written is a note each epoch; training goes on") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  write_text(dir / "tiny.model", kTinyModel);
  // A folder where the page should go: every write of it fails (after each of the 2 epochs'
  // checkpoints, and at the end).
  std::filesystem::create_directories(dir / "run/report.html/x");
  const Ran r = run_cutrain({"train", "--train", fm.train, "--val", fm.test, "--limit-train",
                             "64", "--limit-val", "32", "--model", dir / "tiny.model", "--batch",
                             "32", "--epochs", "2", "--threads", "2", "--device", "cpu", "--out",
                             dir / "run"},
                            dir / "log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(count_of(r.output, "cutrain: could not write " + dir / "run" +
                              "/report.html (training goes on): ") == 3);
  REQUIRE(r.output.find("; report: ") == std::string::npos);  // the summary names no page
  REQUIRE(std::filesystem::exists(dir / "run/step-00000004.h5"));
  REQUIRE(std::filesystem::is_directory(dir / "run/report.html"));
}
