// The run report in a real browser: headless Chromium opens a real run's RUN/report.html,
// dumps the DOM it built (the page parsed: its charts are there) and takes a screenshot, which
// stb_image decodes: the page drew something, in many colours, not a blank or an error page.
// Skipped, saying why, where Chromium is not installed (`make deps` installs it).
#include <stb_image.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/report/report_fixture.h"

using namespace cutrain_test;

namespace {

// `chromium --headless ... <what> file://page`, its output (stdout and stderr) to `log`. A
// browser of its own (--user-data-dir) in `profile`. Killed only if it runs for 5 minutes:
// a start on a busy machine takes seconds, never that.
Ran chromium(const std::string& exe, const std::string& page, const std::string& what,
             const std::string& profile, const std::string& log) {
  return run_process({"/usr/bin/timeout", "-k", "10", "300", exe, "--headless", "--no-sandbox",
                      "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                      "--user-data-dir=" + profile, "--window-size=1280,2000", what,
                      "file://" + std::filesystem::absolute(page).string()},
                     log);
}

}  // namespace

TEST_CASE("report: headless Chromium renders a real run's report.html") {
  const std::string exe = find_program("chromium");
  if (exe.empty()) {
    skip("chromium is not installed (make deps installs it): the report is not rendered");
    return;
  }
  const ReportedRun& run = reported_run();
  REQUIRE_MESSAGE(run.train.status == 0, run.train.output);
  const std::string page = run.dir + "/report.html";
  TempDir dir;

  // The DOM as Chromium built it from the page: the title, and the 8 drawings as <svg>
  // elements (6 charts, per-class accuracy, the confusion matrix).
  {
    const Ran dom = chromium(exe, page, "--dump-dom", dir / "profile-dom", dir / "dom.log");
    INFO(dom.output);  // the DOM, after Chromium's harmless warnings (no D-Bus, ...)
    REQUIRE(dom.status == 0);
    REQUIRE(dom.output.find("<title>cutrain report: run</title>") != std::string::npos);
    REQUIRE(count_of(dom.output, "<svg ") == 8);
    REQUIRE(dom.output.find("Confusion matrix") != std::string::npos);
  }

  // The screenshot: 1280 x 2000 pixels, and a page's worth of drawing in it.
  const std::string png = dir / "report.png";
  const Ran shot = chromium(exe, page, "--screenshot=" + png, dir / "profile-shot",
                            dir / "shot.log");
  REQUIRE_MESSAGE(shot.status == 0, shot.output);
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> px(stbi_load(png.c_str(), &w, &h, &channels, 3),
                                               stbi_image_free);
  REQUIRE_MESSAGE(px, "stb_image cannot read " << png << ": " << stbi_failure_reason());
  REQUIRE(w == 1280);
  REQUIRE(h == 2000);
  // The colours and how many pixels each has; the most common one is the background.
  std::unordered_map<uint32_t, int64_t> colours;
  const uint8_t* p = px.get();
  for (int64_t i = 0; i < int64_t(w) * h; i++, p += 3)
    colours[uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]]++;
  int64_t background = 0;
  for (const auto& [rgb, n] : colours) background = std::max(background, n);
  const double drawn = 1 - double(background) / (double(w) * h);
  MESSAGE("report.png: " << colours.size() << " colours, " << 100 * drawn
                         << "% of the pixels not the background");
  REQUIRE(colours.size() >= 500);  // text, lines in train and val colours, the heat map
  REQUIRE(drawn >= 0.2);           // cards, charts, tables: not a blank page
}
