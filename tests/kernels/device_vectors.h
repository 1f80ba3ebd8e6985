// defines: helpers for the kernel GPU tests: to_device() and to_host() move a std::vector to
// and from a DeviceBuffer, require_same_bits() compares two vectors byte for byte and names
// the first element that differs.
#pragma once
#include <cstring>
#include <vector>

#include "kernels/gpu.h"
#include "tests/test_util.h"

namespace cutrain_test {

// A device copy of v (at least one byte, so an empty vector still gives a valid pointer).
template <typename V> cutrain::DeviceBuffer to_device(const std::vector<V>& v) {
  cutrain::DeviceBuffer b(v.empty() ? 1 : v.size() * sizeof(V));
  if (!v.empty()) cutrain::copy_sync(b.data(), v.data(), v.size() * sizeof(V));
  return b;
}

// The first n values of b, after everything queued before on any stream has been synchronised
// by the caller.
template <typename V> std::vector<V> to_host(const cutrain::DeviceBuffer& b, size_t n) {
  std::vector<V> v(n);
  if (n) cutrain::copy_sync(v.data(), b.data(), n * sizeof(V));
  return v;
}

// got and want hold the same bytes; a failure names the first element that differs.
template <typename V>
void require_same_bits(const std::vector<V>& got, const std::vector<V>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(V)) == 0) continue;
    INFO(what << ": element " << i << " of " << got.size() << ": got " << double(got[i])
              << ", want " << double(want[i]));
    REQUIRE(std::memcmp(&got[i], &want[i], sizeof(V)) == 0);
  }
}

}  // namespace cutrain_test
