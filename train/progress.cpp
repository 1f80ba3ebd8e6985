#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace cutrain {

Progress::Progress(std::string verb, std::string unit)
    : verb_(std::move(verb)), unit_(std::move(unit)), tty_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::operator()(int64_t done, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  const bool finished = done >= total;
  if (tty_) {
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
  std::fprintf(stderr, "%s  %s %lld / %lld %s  %.0f/s", tty_ ? "\r" : "", verb_.c_str(),
               (long long)done, (long long)total, unit_.c_str(), rate);
  if (finished) {
    std::fprintf(stderr, "  in %.1f s", s);
  } else {
    const int left = rate > 0 ? int(double(total - done) / rate) : 0;
    std::fprintf(stderr, "  %d:%02d left", left / 60, left % 60);
  }
  if (!tty_ || finished) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace cutrain
