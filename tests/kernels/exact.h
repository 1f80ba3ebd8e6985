// defines: what the exact kernel tests share: to<T>() and doubles() to move small integer
// test data in and out of a storage type, and require_equal() for exact comparisons.
#pragma once
#include <vector>

#include "tests/test_util.h"

namespace cutrain_test {

// Each value converted to T (rounded to nearest even for half_t).
template <typename T> std::vector<T> to(const std::vector<double>& v) {
  std::vector<T> out;
  for (double d : v) out.push_back(T(d));
  return out;
}

template <typename T> std::vector<double> doubles(const std::vector<T>& v) {
  std::vector<double> out;
  for (const T& t : v) out.push_back(static_cast<double>(t));
  return out;
}

// Element by element, exactly; a failure names the element.
inline void require_equal(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(got[i] == want[i]);
  }
}

}  // namespace cutrain_test
