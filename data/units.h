// defines: format_hms() and bytes_str(): durations and sizes as a person reads them, written
// the same way in the progress lines, the run's messages and its report page.
#pragma once
#include <cstdint>
#include <string>

namespace cutrain {

// "h:mm:ss" of a number of seconds, rounded to the second: 0 -> "0:00:00", 3725.4 ->
// "1:02:05", 360000 -> "100:00:00". Negative, NaN or infinite (no estimate yet): "-:--:--".
std::string format_hms(double seconds);

// "41.2 GiB", "12.0 MiB", "3.0 KiB", "512 bytes" (binary units, one decimal).
std::string bytes_str(int64_t bytes);

}  // namespace cutrain
