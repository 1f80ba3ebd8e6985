#include "data/units.h"

#include <cmath>
#include <cstdio>

namespace cutrain {

std::string format_hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--:--";
  const long long s = std::llround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string bytes_str(int64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (b >= double(1LL << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / double(1LL << 30));
  else if (b >= double(1LL << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1LL << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else
    std::snprintf(buf, sizeof buf, "%lld bytes", (long long)bytes);
  return buf;
}

}  // namespace cutrain
