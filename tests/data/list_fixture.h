// defines: labels_of(), the labels of a read list in order, for the list and CSV reader tests.
#pragma once
#include <cstdint>
#include <vector>

#include "data/image_list.h"

namespace cutrain_test {

inline std::vector<int32_t> labels_of(const cutrain::ImageList& l) {
  std::vector<int32_t> v;
  for (const cutrain::Sample& s : l.samples) v.push_back(s.label);
  return v;
}

}  // namespace cutrain_test
