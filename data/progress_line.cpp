#include "data/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>

#include "data/text_width.h"
#include "data/units.h"

namespace cutrain {

std::string format_train_progress(const StepMetrics& m, int epochs, int64_t steps, double eta_s) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf,
                        "epoch %d/%d  step %lld/%lld  loss %.4f  acc %.2f%%  %.0f img/s",
                        m.epoch, epochs, (long long)m.step, (long long)steps, m.loss,
                        100 * m.accuracy, m.images_per_s);
  // The device's clock: busy %, the bound and the pipeline ratio (left out when not measured).
  if (m.bound != Bound::unknown && n > 0 && size_t(n) < sizeof buf)
    n += std::snprintf(buf + n, sizeof buf - size_t(n), "  busy %.0f%%  %s-bound", m.busy_pct,
                       bound_name(m.bound));
  if (m.pipeline_ratio >= 0 && n > 0 && size_t(n) < sizeof buf)
    n += std::snprintf(buf + n, sizeof buf - size_t(n), "  pipeline %.2f", m.pipeline_ratio);
  if (m.sync_bn_pct >= 0 && n > 0 && size_t(n) < sizeof buf)
    n += std::snprintf(buf + n, sizeof buf - size_t(n), "  sync-bn %.1f%%", m.sync_bn_pct);
  if (m.loss_scale != 0 && n > 0 && size_t(n) < sizeof buf) {
    // powers of two (the dynamic scale) print whole: 65536, not 6.554e+04
    const bool whole = m.loss_scale == std::floor(m.loss_scale) && std::fabs(m.loss_scale) < 1e15;
    n += std::snprintf(buf + n, sizeof buf - size_t(n), whole ? "  scale %.0f" : "  scale %g",
                       m.loss_scale);
  }
  return std::string(buf) + "  ETA " + format_hms(eta_s);
}

StatusLine::StatusLine(FILE* out) : StatusLine(out, isatty(fileno(out)) != 0, -1) {}

StatusLine::StatusLine(FILE* out, bool tty, int width) : out_(out), tty_(tty), width_(width) {}

StatusLine::~StatusLine() { end_line(); }

void StatusLine::show(const std::string& text) {
  if (!tty_) {
    std::fprintf(out_, "%s\n", text.c_str());
    std::fflush(out_);
    return;
  }
  int width = width_;
  if (width < 0) {  // ask the terminal each time: it may have been resized
    struct winsize ws;
    width = ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 ? int(ws.ws_col) : 0;
  }
  // A line as wide as the terminal wraps, and "\r" then returns to the wrapped part only.
  // Clipped in terminal columns, between characters (data/text_width.h).
  const std::string shown = width > 1 ? truncate_to_width(text, size_t(width - 1)) : text;
  std::fprintf(out_, "\r%s\033[K", shown.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void StatusLine::end_line() {
  if (!drawn_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = false;
}

TrainProgress::TrainProgress(int epochs, int64_t steps, int64_t log_every, FILE* out)
    : epochs_(epochs), steps_(steps), log_every_(log_every), line_(out) {}

TrainProgress::TrainProgress(int epochs, int64_t steps, int64_t log_every, FILE* out, bool tty,
                             int width)
    : epochs_(epochs), steps_(steps), log_every_(log_every), line_(out, tty, width) {}

bool TrainProgress::update(const StepMetrics& m, double eta_s, Clock::time_point now) {
  const bool last = m.step >= steps_;
  bool due;
  if (line_.tty())
    due = last || !drawn_ || now - last_draw_ >= redraw;
  else  // the step crossed a multiple of log_every since the last line (however often called)
    due = last || (log_every_ > 0 && m.step / log_every_ > last_logged_ / log_every_);
  if (!due) return false;
  line_.show(format_train_progress(m, epochs_, steps_, eta_s));
  if (last) line_.end_line();
  drawn_ = true;
  last_draw_ = now;
  last_logged_ = m.step;
  return true;
}

}  // namespace cutrain
