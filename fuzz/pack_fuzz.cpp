// Fuzz target: HDF5 packs (data/pack.h), as `cutrain train --train PACK.h5` opens them.
//
// The input is written to a file, then
//  1. read_pack_info: the validated open (attributes, every dataset's type and shape);
//  2. PackSource with the loader's view of it (the stored channels, a crop 2 pixels smaller
//     than the stored size with padding and flips) and an in-memory limit of 4 KiB, so small
//     packs are read whole at open and larger ones stay on disk and are read one image at a
//     time; three samples are loaded (the first, the middle, the last).
// After each input no HDF5 object may be left open: a leaked identifier is a finding too (it
// keeps the file open, and the next open of the same path would find the stale one).
//
// The parsing of the HDF5 format itself is libhdf5's (uninstrumented here); what this target
// checks is that cutrain's checks stand between a damaged file and its allocations and reads.
//
// Left out, knowingly: inputs that walk into known bugs of libhdf5 1.10's global heap reader
// (fuzz/hdf5_guard.h; fuzz/libhdf5/pack/ keeps one) are refused here, before cutrain sees them,
// and what fails inside libhdf5 anyway is set aside by fuzz/run.sh: a damaged pack can still
// crash or hang cutrain inside libhdf5 (fuzz/README.md, "libhdf5").
#include <hdf5.h>

#include <vector>

#include "data/pack.h"
#include "fuzz/feed.h"
#include "fuzz/hdf5_guard.h"

namespace cutrain_fuzz {

namespace {

constexpr int64_t kInMemoryBytes = 4096;

void check_no_open_hdf5_objects() {
  cutrain::H5Lock lock;
  fuzz_require(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0,
               "every HDF5 object opened for the input is closed");
}

void use_pack(const std::string& path) {
  const cutrain::PackInfo info = cutrain::read_pack_info(path);
  fuzz_require(info.count >= 1 && info.size >= 1 && (info.channels == 1 || info.channels == 3),
               "an accepted pack holds images");
  cutrain::ImageSpec spec;
  spec.size = info.size > 2 ? info.size - 2 : info.size;
  spec.channels = info.channels;
  spec.random_crop = true;
  spec.pad = spec.size > 1 ? 1 : 0;
  spec.random_flip = true;
  const cutrain::PackSource src(path, spec, kInMemoryBytes);
  fuzz_require(src.size() == info.count, "the source has the pack's images");
  std::vector<uint8_t> out(src.sample_bytes());  // uncut: the window and its margin
  for (int64_t i : {int64_t(0), src.size() / 2, src.size() - 1}) {
    cutrain::StageTimes t;
    cutrain::InputCrop window;
    // a read error is a bad sample
    (void)src.load(i, uint64_t(i) * 7919, out.data(), window, t);
    const int32_t label = src.label(i);
    fuzz_require(label >= 0 && (info.class_names.empty() ||
                                size_t(label) < info.class_names.size()),
                 "labels are in range");
    (void)src.source_index(i);
  }
}

}  // namespace

Outcome feed_pack(const uint8_t* data, size_t size) {
  if (!libhdf5_heap_trap(data, size).empty()) return Outcome::refused;
  const std::string path = scratch_file("pack.h5", data, size);
  const Outcome o = refuse_errors([&] { use_pack(path); });
  check_no_open_hdf5_objects();
  return o;
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_pack)
