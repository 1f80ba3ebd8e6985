// defines: check_list and check_round_trip, what the list targets (image_list, csv_list)
// check of every list the parser accepted: its header's promises (paths absolute and
// lexically normal, labels in range), the hash and histogram, and a copy written with
// write_image_list that reads back as the same samples.
#pragma once
#include <algorithm>
#include <filesystem>
#include <string>

#include "data/image_list.h"
#include "fuzz/feed.h"

namespace cutrain_fuzz {

inline void check_list(const cutrain::ImageList& l) {
  fuzz_require(!l.samples.empty(), "an accepted list has samples");
  const int classes = int(l.class_names.size());
  int32_t max_label = 0;
  for (const cutrain::Sample& s : l.samples) {
    const std::filesystem::path p(s.path);
    fuzz_require(p.is_absolute() && p.lexically_normal() == p,
                 "path '" + s.path + "' is absolute and lexically normal");
    fuzz_require(s.label >= 0 && (classes == 0 || s.label < classes),
                 "label " + std::to_string(s.label) + " is in range");
    max_label = std::max(max_label, s.label);
  }
  (void)cutrain::image_list_hash(l);
  // (the histogram has a counter per class: a label of 10^9 is the caller's to allow or not)
  if (max_label < (1 << 16)) (void)cutrain::class_histogram(l, max_label + 1);
}

// write_image_list, then read_image_list of the copy (beside the original, so relative paths
// mean the same): the same samples must come back. The writer may refuse a path it cannot
// write (a line break, a tab); that is a clean refusal.
inline void check_round_trip(const cutrain::ImageList& l) {
  const std::string copy = scratch_file("copy.txt", nullptr, 0);
  const Outcome o = refuse_errors([&] { cutrain::write_image_list(l, copy); });
  if (o == Outcome::refused) return;
  const cutrain::ImageList back = cutrain::read_image_list(copy);
  fuzz_require(back.samples.size() == l.samples.size(), "the copy has as many samples");
  for (size_t i = 0; i < l.samples.size(); i++)
    fuzz_require(back.samples[i].path == l.samples[i].path &&
                     back.samples[i].label == l.samples[i].label,
                 "sample " + std::to_string(i) + " '" + l.samples[i].path +
                     "' reads back from the copy as '" + back.samples[i].path + "'");
}

// The class names a list introduced itself (no classes.txt, no given classes): sorted by
// byte order, distinct, and writable to a classes.txt.
inline void check_collected_names(const cutrain::ImageList& l) {
  if (l.class_names.empty()) return;  // integer labels
  for (size_t k = 1; k < l.class_names.size(); k++)
    fuzz_require(l.class_names[k - 1] < l.class_names[k],
                 "class names sorted and distinct: '" + l.class_names[k - 1] + "' before '" +
                     l.class_names[k] + "'");
  const std::string names = scratch_file("names.txt", nullptr, 0);
  fuzz_require(refuse_errors([&] { cutrain::write_class_names(l.class_names, names); }) ==
                   Outcome::accepted,
               "the list's class names can be written to a classes.txt");
}

}  // namespace cutrain_fuzz
