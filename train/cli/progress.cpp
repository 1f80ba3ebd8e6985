#include "train/cli/progress.h"

#include <cstdio>

#include "data/units.h"

namespace cutrain {

Progress::Progress(std::string verb, std::string unit)
    : verb_(std::move(verb)), unit_(std::move(unit)), line_(std::make_shared<StatusLine>(stderr)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::operator()(int64_t done, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  const bool finished = done >= total;
  if (line_->tty()) {
    // redraw at most 10 times a second, and once at the end
    if (!finished && now - last_draw_ < std::chrono::milliseconds(100)) return;
  } else {
    const int64_t tenth = total > 0 ? done * 10 / total : 10;
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
  }
  last_draw_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  const double rate = s > 0 ? double(done) / s : 0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %s %lld / %lld %s  %.0f/s", verb_.c_str(), (long long)done,
                (long long)total, unit_.c_str(), rate);
  std::string text = buf;
  if (finished) {
    std::snprintf(buf, sizeof buf, "  in %.1f s", s);
    text += buf;
  } else {
    text += "  " + format_hms(rate > 0 ? double(total - done) / rate : -1) + " left";
  }
  line_->show(text);
  if (finished) line_->end_line();
}

}  // namespace cutrain
