// defines: fashion_mnist_jpegs(), the real Fashion-MNIST data set as the trainer reads it
// (JPEG files, train.txt, test.txt, classes.txt), imported from the Debian package's IDX files
// once per test process into a folder in memory when possible, and removed at exit.
#pragma once
#include <string>

#include "data/fashion_mnist.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace cutrain_test {

struct FashionMnistFiles {
  std::string dir, train, test, classes;  // the folder, the two lists, classes.txt
};

// About a second on two cores (70,000 small JPEGs).
inline const FashionMnistFiles& fashion_mnist_jpegs() {
  static TempDir dir(TempDir::memory_if_possible);
  static const FashionMnistFiles files = [] {
    cutrain::ImportOptions opt;
    opt.threads = 2;
    const cutrain::ImportSummary s = cutrain::import_fashion_mnist(cutrain::fashion_mnist_idx_dir(),
                                                                   dir / "fmnist", opt);
    return FashionMnistFiles{s.out_dir, s.train_list, s.test_list, s.classes_file};
  }();
  return files;
}

}  // namespace cutrain_test
