// defines: Progress, the progress line of long commands (import, pack, check-data): on a
// terminal one line redrawn in place, with the rate and the time left; in a log (stderr not a
// terminal) a plain line every tenth of the way, so logs stay short and readable.
// It draws with StatusLine (data/progress_line.h), like the training progress line.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "data/progress_line.h"

namespace cutrain {

class Progress {
 public:
  // "decoded", "images": prints like "  decoded 12000 / 70000 images  5400/s  0:00:10 left"
  Progress(std::string verb, std::string unit);
  void operator()(int64_t done, int64_t total);

 private:
  std::string verb_, unit_;
  std::shared_ptr<StatusLine> line_;  // shared: the data functions take a copy of Progress
  int64_t last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace cutrain
