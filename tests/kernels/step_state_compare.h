// defines: require_same_state(), two StepStates (kernels/step_state.h) field by field, the
// doubles and the float by their bits: what the CPU and GPU step-state tests compare with.
#pragma once
#include <cstring>

#include "kernels/step_state.h"
#include "tests/test_util.h"

namespace cutrain_test {

inline void require_same_state(const cutrain::StepState& got, const cutrain::StepState& want) {
  auto same = [](const auto& a, const auto& b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  REQUIRE(same(got.scaler.scale, want.scaler.scale));
  REQUIRE(got.scaler.clean_steps == want.scaler.clean_steps);
  REQUIRE(got.scaler.consecutive_skips == want.scaler.consecutive_skips);
  REQUIRE(got.scaler.skipped_total == want.scaler.skipped_total);
  REQUIRE(same(got.scale_used, want.scale_used));
  REQUIRE(same(got.lr, want.lr));
  REQUIRE(got.steps_taken == want.steps_taken);
  REQUIRE(got.t == want.t);
  REQUIRE(same(got.inv_scale, want.inv_scale));
  REQUIRE(got.skip == want.skip);
  REQUIRE(got.first_bad == want.first_bad);
  REQUIRE(got.peak_skips == want.peak_skips);
}

}  // namespace cutrain_test
