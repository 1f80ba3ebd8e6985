// The progress lines: exact strings from format_train_progress(); when
// TrainProgress prints (every N steps in a log, throttled redraws on a terminal); how
// StatusLine draws on a terminal (carriage return, erase to the end, clipping in columns,
// line ends).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "data/progress_line.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// A FILE* whose contents the test can read back.
struct Capture {
  FILE* f = std::tmpfile();
  ~Capture() { std::fclose(f); }
  std::string text() {
    std::fflush(f);
    std::string s(size_t(std::ftell(f)), '\0');
    std::rewind(f);
    s.resize(std::fread(&s[0], 1, s.size(), f));
    return s;
  }
};

StepMetrics metrics(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.epoch = 2;
  m.loss = 0.43121;
  m.accuracy = 0.84375;
  m.images_per_s = 12345.4;
  m.data_wait_pct = 2.06;
  m.busy_pct = 96.4;
  m.device_wait_pct = 0.4;
  m.idle_pct = 3.2;
  m.bound = Bound::compute;
  m.pipeline_ratio = 1.0372;
  m.loss_scale = 65536;
  return m;
}
}  // namespace

TEST_CASE("progress: the training line, exactly") {
  REQUIRE(format_train_progress(metrics(1200), 10, 4690, 723.4) ==
          "epoch 2/10  step 1200/4690  loss 0.4312  acc 84.38%  12345 img/s  busy 96%  "
          "compute-bound  pipeline 1.04  scale 65536  ETA 0:12:03");
  StepMetrics fp32 = metrics(7);
  fp32.loss_scale = 0;  // no scaling: no scale shown
  fp32.bound = Bound::loader;
  fp32.busy_pct = 31.6;
  fp32.pipeline_ratio = 1.5;
  REQUIRE(format_train_progress(fp32, 1, 10, std::nan("")) ==
          "epoch 2/1  step 7/10  loss 0.4312  acc 84.38%  12345 img/s  busy 32%  loader-bound  "
          "pipeline 1.50  ETA -:--:--");
  StepMetrics odd = metrics(7);
  odd.loss_scale = 0.5;
  odd.loss = HUGE_VAL;
  // the device's clock measured nothing in the window: no busy, bound or ratio
  odd.bound = Bound::unknown;
  odd.busy_pct = odd.pipeline_ratio = -1;
  REQUIRE(format_train_progress(odd, 3, 10, 5) ==
          "epoch 2/3  step 7/10  loss inf  acc 84.38%  12345 img/s  scale 0.5  ETA 0:00:05");
  odd.loss_scale = 16777216;  // 2^24: whole, not 1.67772e+07
  REQUIRE(format_train_progress(odd, 3, 10, 5).find("scale 16777216  ") != std::string::npos);
  StepMetrics synced = metrics(1200);  // --sync-bn: its share of the time after the pipeline
  synced.sync_bn_pct = 12.5;
  REQUIRE(format_train_progress(synced, 10, 4690, 723.4) ==
          "epoch 2/10  step 1200/4690  loss 0.4312  acc 84.38%  12345 img/s  busy 96%  "
          "compute-bound  pipeline 1.04  sync-bn 12.5%  scale 65536  ETA 0:12:03");
}

TEST_CASE("progress: in a log, a plain line at each multiple of N steps and at the last step") {
  Capture out;
  TrainProgress p(3, 250, 100, out.f, false);
  int printed = 0;
  for (int64_t step = 30; step <= 250; step += 30) printed += p.update(metrics(step), 1);
  printed += p.update(metrics(250), 0);  // the last step, whatever N
  REQUIRE(printed == 3);
  const std::string text = out.text();
  REQUIRE(text ==
          format_train_progress(metrics(120), 3, 250, 1) + "\n" +  // first update past 100
          format_train_progress(metrics(210), 3, 250, 1) + "\n" +  // first past 200
          format_train_progress(metrics(250), 3, 250, 0) + "\n");
  REQUIRE(text.find('\r') == std::string::npos);
}

TEST_CASE("progress: on a terminal, redrawn in place at most every 0.1 s, ended at the last step") {
  using namespace std::chrono;
  Capture out;
  TrainProgress p(1, 100, 10, out.f, true, 40);
  const auto t0 = TrainProgress::Clock::now();
  REQUIRE(p.update(metrics(1), 1, t0));                         // the first one draws
  REQUIRE(!p.update(metrics(2), 1, t0 + milliseconds(50)));     // too soon
  REQUIRE(p.update(metrics(3), 1, t0 + milliseconds(120)));
  p.end_line();  // an evaluation is about to print
  p.end_line();  // nothing drawn since: no second line end
  REQUIRE(p.update(metrics(100), 0, t0 + milliseconds(130)));  // the last step: always drawn
  // Clipped to 39 columns: 38 of the line and "…".
  const std::string line1 = format_train_progress(metrics(1), 1, 100, 1).substr(0, 38) + "\u2026";
  const std::string line3 = format_train_progress(metrics(3), 1, 100, 1).substr(0, 38) + "\u2026";
  const std::string last = format_train_progress(metrics(100), 1, 100, 0).substr(0, 38) + "\u2026";
  REQUIRE(out.text() == "\r" + line1 + "\033[K\r" + line3 + "\033[K\n\r" + last + "\033[K\n");
}

TEST_CASE("progress: StatusLine prints plain lines off a terminal and ends a drawn line once") {
  Capture plain;
  {
    StatusLine line(plain.f, false);
    line.show("a");
    line.show("bb");
    line.end_line();
  }
  REQUIRE(plain.text() == "a\nbb\n");
  Capture tty;
  {
    StatusLine line(tty.f, true);  // width 0: not clipped
    line.show("first");
    line.show("2nd");
  }  // the destructor ends the drawn line
  REQUIRE(tty.text() == "\rfirst\033[K\r2nd\033[K\n");
}

TEST_CASE("progress: StatusLine clips a terminal line in columns, never inside a character") {
  Capture tty;
  {
    StatusLine line(tty.f, true, 7);  // 6 columns drawn
    line.show("\u9774\u9774\u9774\u9774");  // 靴靴靴靴: 8 columns, 12 bytes
    line.show("N\u0303andu\u0301 ok");       // Ñandú with combining marks, 8 columns
    line.show("12345");                       // fits: as is
  }
  REQUIRE(tty.text() == "\r\u9774\u9774\u2026\033[K"          // 5 columns: a third 靴 would be 7
                        "\rN\u0303andu\u0301\u2026\033[K"      // the marks stay on their letters
                        "\r12345\033[K\n");
}
