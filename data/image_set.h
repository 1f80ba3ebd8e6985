// defines: write_image_set(), a folder of images made by a function, written as JPEG files
// with train and test lists and classes.txt: the layout of the demo's data (Fashion-MNIST,
// data/fashion_mnist.h) and of the synthetic photos of the decode-heavy benchmark
// (data/photos.h), written the same crash-safe way and kept when complete.
//
// Layout written under out_dir:
//   <split>/<label>/<index>.jpg   <index> is the image's position in its split, five digits
//                                 (00000..99999), so names sort in order
//   <split>.txt                   one line per image in index order: "train/9/00000.jpg<TAB>9",
//                                 paths relative to out_dir (where the lists are)
//   classes.txt                   the class names, one a line, in label order
//   recipe.txt                    (when a recipe is given) how the images were made
// Folders are named by label, not by class name: a name may hold a slash ("T-shirt/top"), and
// the digits sort in label order, so reading <split>/ in folder-per-class mode gives the same
// labels (up to 10 classes).
//
// Crash safety: the lists, classes.txt and recipe.txt are written to temporary files and
// renamed into place only after every image is written, and a write first removes the old
// ones. So a list, when present, points only at complete files, whatever moment the writer was
// killed. (The images are not fsynced: that guards against a killed process, not a power cut.)
//
// Reuse: a folder whose lists, classes.txt and recipe.txt are exactly what this call would
// write, and whose listed files all exist and are non-empty, is kept as it is
// (ImageSetSummary::reused) unless `force` is set. The pixels are not re-checked: that needs
// decoding, which is the tests' job.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cutrain {

struct ImageSetSplit {
  std::string name;             // "train", "test": its folder and its list, <name>.txt
  std::vector<int32_t> labels;  // one per image, each in [0, classes)
};

struct ImageSetOptions {
  int threads = 0;     // encoder threads; 0 = the hardware threads
  bool force = false;  // write again even when a complete set is already there
  // Called on the calling thread about four times a second while images are written, and once
  // at the end: images written so far, of the total. Null: silent.
  std::function<void(int64_t done, int64_t total)> progress;
  // Called once on the calling thread when images are to be written (not when a complete set
  // is kept), before the first jpeg() call: where a caller reads what the images are made
  // from. Null: nothing to read.
  std::function<void()> prepare;
};

struct ImageSetSummary {
  std::vector<std::string> lists;  // out_dir/<split>.txt, in the order of the splits
  std::string classes_file;        // out_dir/classes.txt
  bool reused = false;             // a complete set was already there; nothing was written
  int64_t jpeg_bytes = 0;          // bytes of JPEG written (0 when reused)
  int threads = 0;                 // encoder threads used (0 when reused)
  double seconds = 0;              // wall time of the whole call
};

// "train/9/00000.jpg": where image `index` of a split lies, relative to out_dir.
std::string image_set_path(const std::string& split, int label, int64_t index);

// Writes the layout above. jpeg(s, i) returns the file of image i of split s; it is called
// once per image, on the encoder threads, in any order. `recipe`: a text naming how the
// images are made (their generator, its settings), written as recipe.txt; "" writes none.
// Labels outside [0, class_names.size()), write failures and exceptions thrown by jpeg()
// throw cutrain::Error.
ImageSetSummary write_image_set(const std::string& out_dir,
                                const std::vector<std::string>& class_names,
                                const std::vector<ImageSetSplit>& splits,
                                const std::function<std::vector<uint8_t>(int, int64_t)>& jpeg,
                                const std::string& recipe = "",
                                const ImageSetOptions& opt = {});

}  // namespace cutrain
