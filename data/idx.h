// defines: IdxImages, read_idx_images(), read_idx_labels(), read_idx_dataset(): readers for the
// IDX files MNIST and Fashion-MNIST ship in (gzip-compressed or plain).
//
// The format (all sizes big-endian uint32):
//   images: magic 0x00000803, then N, rows, cols, then N*rows*cols uint8 pixels, row-major
//   labels: magic 0x00000801, then N, then N uint8 labels
// The magic's third byte is the element type (0x08 = uint8), its fourth the number of
// dimensions. Only these two kinds are read: they are all that MNIST-style data sets use.
//
// Every file is checked in full: a wrong magic, a header or body shorter than the sizes it
// declares, bytes after the declared data, and an image file and a label file whose counts
// disagree are refused with a cutrain::Error naming the file.
#ifndef CUTRAIN_DATA_IDX_H
#define CUTRAIN_DATA_IDX_H
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // uint8, 3 dimensions (N, rows, cols)
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // uint8, 1 dimension (N)

struct IdxImages {
  int64_t N = 0;
  int H = 0, W = 0;
  std::vector<uint8_t> pixels;  // (N,H,W) uint8, grayscale, 0 = background
  const uint8_t* image(int64_t i) const { return pixels.data() + i * H * W; }
};

// Reads an IDX image file (magic 0x00000803); gzip or plain, decided by the content.
IdxImages read_idx_images(const std::string& path);

// Reads an IDX label file (magic 0x00000801): N labels, one byte each, not range-checked.
std::vector<uint8_t> read_idx_labels(const std::string& path);

// An image file and its label file, checked to hold the same number of samples.
struct IdxDataset {
  IdxImages images;
  std::vector<uint8_t> labels;  // (N) uint8
};
IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path);

}  // namespace cutrain
#endif  // CUTRAIN_DATA_IDX_H
