// Fuzz target: IDX files, gzip-compressed or plain (data/idx.h), as `cutrain
// import-fashion-mnist` reads them. Each input is written to a file and read both as an image
// file and as a label file (the magic picks which one can succeed); what is accepted must hold
// exactly the data its header declares.
#include <string>

#include "data/idx.h"
#include "fuzz/feed.h"

namespace cutrain_fuzz {

Outcome feed_idx(const uint8_t* data, size_t size) {
  const std::string path = scratch_file("data.idx", data, size);
  const Outcome images = refuse_errors([&] {
    const cutrain::IdxImages im = cutrain::read_idx_images(path);
    fuzz_require(im.N >= 0 && im.H >= 1 && im.W >= 1 &&
                     im.pixels.size() == uint64_t(im.N) * uint64_t(im.H) * uint64_t(im.W),
                 "the pixels are N x H x W bytes");
  });
  const Outcome labels = refuse_errors([&] { (void)cutrain::read_idx_labels(path); });
  return images == Outcome::accepted || labels == Outcome::accepted ? Outcome::accepted
                                                                    : Outcome::refused;
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_idx)
