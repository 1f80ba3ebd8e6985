// Fashion-MNIST import: IDX files -> grayscale JPEGs + train/test lists + classes.txt, written
// by write_image_set (data/image_set.h: the layout, crash safety and reuse).
#include "data/fashion_mnist.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "data/idx.h"
#include "data/image.h"
#include "data/image_set.h"
#include "kernels/check.h"

namespace cutrain {
namespace {
namespace fs = std::filesystem;

constexpr int kClasses = 10;

// The two splits: the folder and list name, and the prefix of the IDX files.
struct SplitName {
  const char* name;
  const char* idx_prefix;
};
constexpr SplitName kSplits[2] = {{"train", "train"}, {"test", "t10k"}};

std::string idx_file(const std::string& dir, const char* prefix, const char* kind) {
  return (fs::path(dir) / (std::string(prefix) + "-" + kind + "-ubyte.gz")).string();
}

void check_labels(const std::vector<uint8_t>& labels, const std::string& path) {
  for (size_t i = 0; i < labels.size(); i++)
    USER_CHECK(labels[i] < kClasses, path << ": label " << int(labels[i]) << " of sample " << i
                                     << " is outside [0, " << kClasses << ")");
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

std::string fashion_mnist_idx_dir() {
  const char* dir = std::getenv("CUTRAIN_FASHION_MNIST_DIR");
  return dir != nullptr && *dir != 0 ? dir : kFashionMnistDir;
}

ImportSummary import_fashion_mnist(const std::string& idx_dir, const std::string& out_dir,
                                   const ImportOptions& opt) {
  USER_CHECK(opt.quality >= 1 && opt.quality <= 100,
        "JPEG quality must be in [1, 100]; got " << opt.quality);
  // The labels alone (a few kB) decide what the lists must say, and so whether a previous
  // import can be kept; the images (55 MB) are read only when there is work to do.
  std::vector<ImageSetSplit> splits(2);
  for (int s = 0; s < 2; s++) {
    const std::string path = idx_file(idx_dir, kSplits[s].idx_prefix, "labels-idx1");
    const std::vector<uint8_t> labels = read_idx_labels(path);
    check_labels(labels, path);
    splits[size_t(s)].name = kSplits[s].name;
    splits[size_t(s)].labels.assign(labels.begin(), labels.end());
  }
  IdxImages images[2];
  ImageSetOptions so;
  so.threads = opt.threads, so.force = opt.force, so.progress = opt.progress;
  so.prepare = [&] {  // only when there is work to do
    for (int s = 0; s < 2; s++) {
      IdxDataset d = read_idx_dataset(idx_file(idx_dir, kSplits[s].idx_prefix, "images-idx3"),
                                      idx_file(idx_dir, kSplits[s].idx_prefix, "labels-idx1"));
      USER_CHECK(std::vector<int32_t>(d.labels.begin(), d.labels.end()) ==
                     splits[size_t(s)].labels,
                 idx_dir << ": the label file changed during the import");
      images[s] = std::move(d.images);
    }
  };
  const ImageSetSummary w = write_image_set(
      out_dir, fashion_mnist_classes(), splits,
      [&](int s, int64_t i) {
        const IdxImages& im = images[s];
        return encode_jpeg(im.image(i), im.H, im.W, 1, opt.quality);
      },
      "", so);
  ImportSummary sum;
  sum.out_dir = out_dir;
  sum.train_list = w.lists[0];
  sum.test_list = w.lists[1];
  sum.classes_file = w.classes_file;
  sum.train = int64_t(splits[0].labels.size());
  sum.test = int64_t(splits[1].labels.size());
  sum.reused = w.reused;
  sum.jpeg_bytes = w.jpeg_bytes;
  sum.threads = w.threads;
  sum.seconds = w.seconds;
  return sum;
}

}  // namespace cutrain
