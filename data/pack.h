// defines: write_pack (an image list -> an HDF5 pack of decoded pixels), read_pack_info, and
// PackSource, the loader's source that reads a pack (random access, no decoding).
//
// A pack is the list's images decoded once, resized so the shorter side is `size`, centre
// cropped to size x size, and stored as raw uint8 pixels, so a training run spends no time on
// JPEG decoding. On disk (HDF5, format version kPackVersion):
//
//   /images         uint8 (N, H, W, C), H = W = size; chunked, one chunk = whole images
//                   (as many as fit in 64 KiB, at least one), no compression (see pack_write.cpp)
//   /labels         int32 (N)
//   /source_index   int64 (N)    index in the image list (0-based sample, not file line) of
//                                each packed image: packed image i is list.samples[source_index[i]]
//   /class_names    strings (K)  the list's class names; (0) when it had none
//   /bad_files      strings (B)  paths of the list's images that could not be loaded ...
//   /bad_reasons    strings (B)  ... and why ("truncated JPEG: ...")
//   attributes of /: format = "cutrain-pack", version (int32), size, channels (int32),
//                    source (the list's path, absolute), source_hash (uint64, image_list_hash),
//                    source_count (int64, samples in the list = N + B)
//
// Class names and bad files are datasets, not attributes: HDF5 attributes are meant to be
// small (64 KiB in the default file format), and a list may have thousands of either.
//
// Crash safety (data/atomic_file.h): write_pack writes OUT.h5.tmp-<pid>, closes it, fsyncs
// it, renames it to OUT.h5 and fsyncs the folder. A reader sees the old pack or the whole new
// one, and a killed or crashed packer leaves no file under the final name. It may leave its
// temporary file; the next write_pack of the same OUT removes temporary files of processes
// that no longer run.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/image.h"
#include "data/image_list.h"
#include "data/source.h"

namespace cutrain {

constexpr const char* kPackFormat = "cutrain-pack";
constexpr int kPackVersion = 1;

struct PackOptions {
  int size = 0;         // stored images are size x size
  int channels = 3;     // 1 or 3
  int threads = 0;      // decode threads; 0: the hardware's thread count
  bool strict = false;  // any bad file is fatal (else it is skipped, counted and named)
};

struct PackSummary {
  int64_t listed = 0;         // samples in the list
  int64_t packed = 0;         // images in the pack
  std::vector<BadFile> bad;   // the rest, in list order (index: in the list; name: the path)
  int64_t bytes_on_disk = 0;  // the pack's file size
  double seconds = 0;         // wall time of the whole write
};

// Called after each listed image has been decoded and written (or skipped), from the thread
// that called write_pack: done = 1..total.
using PackProgress = std::function<void(int64_t done, int64_t total)>;

// Decodes every image of `list` with opt.threads threads through load_sample (data/image.h)
// and writes the pack to out_path (layout above), replacing any file there atomically.
// Throws cutrain::Error for bad options, an empty list, a list where no image loads, a bad
// file with opt.strict, and any write failure; then out_path is untouched and the temporary
// file removed.
PackSummary write_pack(const ImageList& list, const std::string& out_path,
                       const PackOptions& opt, const PackProgress& progress = {});

struct PackInfo {
  std::string path;  // as given to read_pack_info
  int version = 0;
  int64_t count = 0;  // N
  int size = 0;       // H = W
  int channels = 0;   // C
  std::vector<std::string> class_names;
  std::string source;       // the list it was made from
  uint64_t source_hash = 0;  // image_list_hash of that list
  int64_t source_count = 0;  // samples in that list
  std::vector<std::string> bad_files, bad_reasons;
};

// Opens and validates a pack (see PackSource) and returns what it holds, without the pixels.
PackInfo read_pack_info(const std::string& path);

// The in-memory limit below which PackSource reads all the pixels at open.
constexpr int64_t kPackMaxInMemoryBytes = int64_t(2) << 30;

// The samples of a pack. Opening validates the file; every problem is a cutrain::Error naming
// the file: missing, not an HDF5 file, not a cutrain pack, another format version, a missing
// dataset or one of the wrong type or shape, labels outside [0, classes).
//
// Memory: when the pixels take at most max_in_memory_bytes (Fashion-MNIST's 70,000 images are
// 55 MB), they are read in one go at open and load() is a copy from memory, with no lock and
// no system call: packs exist to be fast. Larger packs stay on disk and load() reads one
// image (one hyperslab, one chunk) per call, under the process-wide HDF5 lock (H5Lock), since
// the serial HDF5 library is not thread-safe; the lock serialises only the read itself.
class PackSource : public SampleSource {
 public:
  // spec: the loader's output. spec.size <= the stored size (a smaller size crops, centred or
  // at random per spec.random_crop; spec.random_flip mirrors; both as the uncut sample and
  // its window, data/image.h); spec.channels == the stored
  // channels; spec.resize 0 or the stored size (a pack's images are already resized).
  PackSource(const std::string& path, const ImageSpec& spec,
             int64_t max_in_memory_bytes = kPackMaxInMemoryBytes);
  // The stored images as they are: spec.size = the stored size, no crop, no flip.
  explicit PackSource(const std::string& path);

  int64_t size() const override { return info_.count; }
  int32_t label(int64_t i) const override { return labels_[size_t(i)]; }
  std::string name(int64_t i) const override;  // "path[i]"
  const ImageSpec& spec() const override { return spec_; }
  // Never fails for a valid i except on a read error, reported as ImageError::corrupt.
  // t.read_s: the disk read (0 when in memory); t.augment_s: the uncut sample's copy
  // (augment_square_uncut).
  DecodeResult load(int64_t i, uint64_t aug_key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override;

  const PackInfo& info() const { return info_; }
  bool in_memory() const { return !pixels_.empty(); }
  // The packed image i's index in the source list.
  int64_t source_index(int64_t i) const { return source_index_[size_t(i)]; }

 private:
  // Reads stored image i from disk into out; returns "" or what went wrong.
  std::string read_stored(int64_t i, uint8_t* out) const;

  PackInfo info_;
  ImageSpec spec_;
  size_t stored_bytes_ = 0;  // size * size * channels
  std::vector<int32_t> labels_;
  std::vector<int64_t> source_index_;
  std::vector<uint8_t> pixels_;  // (N, H, W, C), when in memory
  H5Handle file_, images_;       // when on disk
};

}  // namespace cutrain
