// defines: check_data, what `cutrain check-data LIST` runs: every image of a list decoded in
// parallel through the same loader a training run uses, with the bad files counted by kind
// and the class histogram.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/image_list.h"
#include "data/loader.h"

namespace cutrain {

struct CheckReport {
  int64_t images = 0;                       // listed
  int64_t good = 0;                         // decoded fine
  std::map<ImageError, int64_t> bad_by_kind;
  std::vector<BadFile> bad;                 // every bad file, in list order
  std::vector<int64_t> histogram;           // good images per class
  double seconds = 0;
  LoaderStats stats;
};

// progress(done, total) is called from the calling thread after every batch.
CheckReport check_data(const ImageList& list, const ImageSpec& spec, int threads,
                       const std::function<void(int64_t, int64_t)>& progress = nullptr);

// Largest class count / smallest (over classes that have any); inf when a class is empty.
double class_imbalance(const std::vector<int64_t>& histogram);

}  // namespace cutrain
