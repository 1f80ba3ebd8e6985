// defines: DataFingerprint, what a checkpoint records of its training data so that a resumed
// run can tell whether it reads the same samples in the same order (the exact continuation
// needs them), and data_difference, which says what changed.
//
//   count    the number of samples
//   hash     FNV-1a 64 over every sample's name (its path; for a pack "pack.h5[i]") and label,
//            in order: any added, removed, reordered, renamed or relabelled sample changes it
//   blocks   the same hash over each run of `block` samples (a power of two: at most 256
//            runs), with the name
//            of the run's first sample: enough to say where the first difference is, in a
//            checkpoint attribute of a few KiB whatever the data's size
//
// The image files' contents are not read: a file replaced in place under the same name keeps
// the fingerprint (the loader then decodes the new one).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/source.h"

namespace cutrain {

struct DataFingerprint {
  int64_t count = 0;
  uint64_t hash = 0;
  int64_t block = 1;                     // samples per block
  std::vector<uint64_t> block_hashes;    // ceil(count / block) of them
  std::vector<std::string> block_first;  // the name of each block's first sample

  bool operator==(const DataFingerprint& o) const { return count == o.count && hash == o.hash; }
  bool operator!=(const DataFingerprint& o) const { return !(*this == o); }

  std::string to_json() const;
  // Throws UserError naming `where` for text that is not a fingerprint.
  static DataFingerprint from_json(const std::string& text, const std::string& where);
};

DataFingerprint fingerprint_of(const SampleSource& source);

// What changed from `was` to `now` (of `source`), for a message: "the count: 60000 then,
// 59000 now; the first difference is in samples 12288-12522: it began with 'a.jpg', now
// 'b.jpg'". "" when they are equal.
std::string data_difference(const DataFingerprint& was, const DataFingerprint& now);

}  // namespace cutrain
