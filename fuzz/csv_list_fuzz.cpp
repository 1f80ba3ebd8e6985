// Fuzz target: CSV lists (data/image_list.h, "CSV files"; libcsv underneath), as `cutrain
// train --train data.csv` reads them.
//
// The input is read three times (the outcome reported is the first's, or the third's when
// there is one):
//  1. whole, as list.csv with no classes.txt beside it: the header's default columns;
//  2. whole again, with csv_columns "0,1" (the columns by index: any header will do, so the
//     rows are reached even when the mutated header names no known column);
//  3. split at its first NUL byte, when it has one: the bytes before it as the CSV, the bytes
//     after it as the classes.txt beside it (names resolved through it, the count, the range).
// What was accepted is checked as the image_list target checks lists (fuzz/list_checks.h).
#include <cstring>

#include "data/image_list.h"
#include "fuzz/feed.h"
#include "fuzz/list_checks.h"

namespace cutrain_fuzz {

namespace {

Outcome read_csv(const std::string& path, const std::string& columns, bool beside_classes) {
  return refuse_errors([&] {
    cutrain::ListOptions opt;
    opt.csv_columns = columns;
    const cutrain::ImageList l = cutrain::read_csv_list(path, opt);
    check_list(l);
    if (!beside_classes) check_collected_names(l);
    check_round_trip(l);
  });
}

}  // namespace

Outcome feed_csv_list(const uint8_t* data, size_t size) {
  scratch_remove(cutrain::kClassNamesFile);
  const std::string csv = scratch_file("list.csv", data, size);
  const Outcome whole = read_csv(csv, "", false);
  (void)read_csv(csv, "0,1", false);
  const void* nul = size ? std::memchr(data, 0, size) : nullptr;
  if (nul == nullptr) return whole;
  const size_t n = size_t(static_cast<const uint8_t*>(nul) - data);
  scratch_file(cutrain::kClassNamesFile, data + n + 1, size - n - 1);
  const Outcome split = read_csv(scratch_file("list.csv", data, n), "", true);
  scratch_remove(cutrain::kClassNamesFile);
  return split;  // what an input with a NUL means
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_csv_list)
