// Durations and sizes as people read them (data/units.h): exact strings.
#include <cmath>
#include <cstdint>

#include "data/units.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("units: format_hms rounds to the second and says when there is no estimate") {
  REQUIRE(format_hms(0) == "0:00:00");
  REQUIRE(format_hms(59.4) == "0:00:59");
  REQUIRE(format_hms(59.5) == "0:01:00");
  REQUIRE(format_hms(3725.4) == "1:02:05");
  REQUIRE(format_hms(360000) == "100:00:00");
  REQUIRE(format_hms(-1) == "-:--:--");
  REQUIRE(format_hms(std::nan("")) == "-:--:--");
  REQUIRE(format_hms(HUGE_VAL) == "-:--:--");
}

TEST_CASE("bytes_str") {
  REQUIRE(bytes_str(512) == "512 bytes");
  REQUIRE(bytes_str(3 << 10) == "3.0 KiB");
  REQUIRE(bytes_str(int64_t(5) << 20) == "5.0 MiB");
  REQUIRE(bytes_str(int64_t(41) << 30) == "41.0 GiB");
}
