// Fuzz target: image lists and classes.txt (data/image_list.h), as `cutrain train --train
// LIST` reads them.
//
// The input is read twice (the outcome reported is the second's, when there is one):
//  1. whole, as a list file with no classes.txt beside it (any label range);
//  2. split at its first NUL byte, when it has one: the bytes before it as the list, the bytes
//     after it as the classes.txt beside the list (so read_class_names, the class count and the
//     label range check are reached too).
// What the parser accepted is checked against its header's promises (paths absolute and
// lexically normal, labels in range; class names of its own sorted, distinct and writable),
// then hashed, counted, and written with write_image_list and read back: the copy must give
// the same samples (fuzz/list_checks.h).
#include <cstring>

#include "data/image_list.h"
#include "fuzz/feed.h"
#include "fuzz/list_checks.h"

namespace cutrain_fuzz {

namespace {

Outcome read_list(const std::string& path, bool beside_classes) {
  return refuse_errors([&] {
    const cutrain::ImageList l = cutrain::read_image_list(path);
    check_list(l);
    if (!beside_classes) check_collected_names(l);
    check_round_trip(l);
  });
}

}  // namespace

Outcome feed_image_list(const uint8_t* data, size_t size) {
  scratch_remove(cutrain::kClassNamesFile);
  const Outcome whole = read_list(scratch_file("list.txt", data, size), false);
  const void* nul = size ? std::memchr(data, 0, size) : nullptr;
  if (nul == nullptr) return whole;
  const size_t n = size_t(static_cast<const uint8_t*>(nul) - data);
  scratch_file(cutrain::kClassNamesFile, data + n + 1, size - n - 1);
  const Outcome split = read_list(scratch_file("list.txt", data, n), true);
  scratch_remove(cutrain::kClassNamesFile);
  return split;  // what an input with a NUL means
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_image_list)
