// defines: import_fashion_mnist(), which turns the Fashion-MNIST IDX files into a folder of
// grayscale JPEGs with train and test lists (the demo's data), and fashion_mnist_classes().
//
// Layout written under out_dir:
//   train/<label>/<index>.jpg   60,000 images; <index> is the sample's position in the IDX file,
//   test/<label>/<index>.jpg    10,000 images   five digits (00000..59999), so names sort in order
//   train.txt, test.txt         one line per image in IDX order: "train/9/00000.jpg<TAB>9",
//                               paths relative to out_dir (where the lists are)
//   classes.txt                 the ten class names, one a line, in label order
// Folders are named by label, not by class name: "T-shirt/top" holds a slash, and the digits
// 0..9 sort in label order, so reading train/ in folder-per-class mode gives the same labels.
//
// Crash safety: the lists and classes.txt are written to temporary files and renamed into
// place only after every image is written, and an import first removes the old lists. So a
// list, when present, points only at complete files, whatever moment the import was killed.
// (The images are not fsynced: that guards against a killed process, not a power cut.)
//
// Reuse: an import whose lists and classes.txt are exactly what this import would write, and
// whose listed files all exist and are non-empty, is kept as it is (summary.reused) unless
// force is set. The pixels are not re-checked: that needs decoding, which is the test's job.
#ifndef CUTRAIN_DATA_FASHION_MNIST_H
#define CUTRAIN_DATA_FASHION_MNIST_H
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cutrain {

// Where the Debian package dataset-fashion-mnist installs the IDX files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// The folder the IDX files are read from by default: $CUTRAIN_FASHION_MNIST_DIR when set (a GPU
// host without the Debian package: make bundle carries the files), else kFashionMnistDir.
std::string fashion_mnist_idx_dir();

// "T-shirt/top", "Trouser", ..., "Ankle boot": the name of label i at index i.
const std::vector<std::string>& fashion_mnist_classes();

struct ImportOptions {
  int threads = 0;      // encoder threads; 0 = the hardware threads
  int quality = 95;     // JPEG quality, 1..100
  bool force = false;   // re-encode even when a complete import is already there
  // Called on the calling thread about four times a second while images are encoded, and
  // once at the end: images written so far, of the total (70,000). Null: silent.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct ImportSummary {
  std::string out_dir, train_list, test_list, classes_file;  // the files written (or kept)
  int64_t train = 0, test = 0;  // list entries
  bool reused = false;          // a complete import was already there; nothing was written
  int64_t jpeg_bytes = 0;       // bytes of JPEG written (0 when reused)
  int threads = 0;              // encoder threads used (0 when reused)
  double seconds = 0;           // wall time of the whole call
};

// Reads idx_dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz and writes the layout above.
// Bad IDX files, labels outside [0, 10) and write failures throw cutrain::Error.
ImportSummary import_fashion_mnist(const std::string& idx_dir, const std::string& out_dir,
                                   const ImportOptions& opt = {});

}  // namespace cutrain
#endif  // CUTRAIN_DATA_FASHION_MNIST_H
