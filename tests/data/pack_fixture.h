// defines: what the pack tests share: write_jpeg_set (a folder of real JPEG files of varied
// sizes, gray and colour, and its list file), centre_sample (what the packer must store for a
// file, through load_sample), and PackData / read_pack_raw (a pack's datasets read straight
// with the HDF5 C API, so the writer is checked without PackSource).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "data/image.h"
#include "data/image_list.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace cutrain_test {

// n JPEG files img<i>.jpg in dir, h x w in [12, 52), label i % 5, every third one grayscale,
// the rest RGB, each with its own pattern (another seed, other pixels); written with the list
// file "list.txt" and a classes.txt of 5 names. Returns the list file's path.
inline std::string write_jpeg_set(const TempDir& dir, int n, int seed = 0) {
  std::string list, classes;
  for (int i = 0; i < n; i++) {
    const int h = 12 + (i * 7) % 40, w = 12 + (i * 13) % 40, c = i % 3 == 0 ? 1 : 3;
    std::vector<uint8_t> px(size_t(h) * w * c);
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int k = 0; k < c; k++)
          px[(size_t(y) * w + x) * c + k] =
              uint8_t(x * 5 + y * 3 + k * 60 + i * 17 + seed * 101 + (((x / 4 + y / 4) & 1) ? 40 : 0));
    const std::vector<uint8_t> jpg = cutrain::encode_jpeg(px.data(), h, w, c, 90);
    write_bytes(dir / ("img" + std::to_string(i) + ".jpg"), jpg);
    list += "img" + std::to_string(i) + ".jpg " + std::to_string(i % 5) + "\n";
  }
  write_text(dir / "list.txt", list);
  write_text(dir / "classes.txt", "ant\nbee\ncat\ndog\neel\n");
  return dir / "list.txt";
}

// What the pack must hold for `path`: load_sample's centred size x size square.
inline std::vector<uint8_t> centre_sample(const std::string& path, int size, int channels) {
  cutrain::ImageSpec spec;
  spec.size = spec.resize = size;
  spec.channels = channels;
  std::vector<uint8_t> out(size_t(size) * size * channels);
  const cutrain::DecodeResult r = cutrain::load_sample(path, spec, 0, out.data());
  INFO(path << ": " << r.message);
  REQUIRE(r.ok());
  return out;
}

struct PackData {
  std::vector<hsize_t> dims, chunk;  // of /images
  int filters = 0;                   // on /images
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  std::vector<int64_t> source_index;
};

// Reads /images, /labels and /source_index as they are on disk.
inline PackData read_pack_raw(const std::string& path) {
  using namespace cutrain;
  H5Lock lock;
  PackData p;
  H5Handle file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, path);
  H5Handle images = h5_owned(H5Dopen2(file.get(), "images", H5P_DEFAULT), H5Dclose, "images");
  H5Handle space = h5_owned(H5Dget_space(images.get()), H5Sclose, "space");
  p.dims.resize(size_t(H5Sget_simple_extent_ndims(space.get())));
  H5Sget_simple_extent_dims(space.get(), p.dims.data(), nullptr);
  H5Handle dcpl = h5_owned(H5Dget_create_plist(images.get()), H5Pclose, "dcpl");
  p.chunk.resize(p.dims.size());
  REQUIRE(H5Pget_chunk(dcpl.get(), int(p.chunk.size()), p.chunk.data()) == int(p.dims.size()));
  p.filters = H5Pget_nfilters(dcpl.get());
  p.images.resize(size_t(H5Sget_simple_extent_npoints(space.get())));
  REQUIRE(H5Dread(images.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                  p.images.data()) >= 0);
  p.labels.resize(size_t(p.dims[0]));
  p.source_index.resize(size_t(p.dims[0]));
  H5Handle labels = h5_owned(H5Dopen2(file.get(), "labels", H5P_DEFAULT), H5Dclose, "labels");
  REQUIRE(H5Dread(labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                  p.labels.data()) >= 0);
  H5Handle index = h5_owned(H5Dopen2(file.get(), "source_index", H5P_DEFAULT), H5Dclose, "idx");
  REQUIRE(H5Dread(index.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                  p.source_index.data()) >= 0);
  return p;
}

}  // namespace cutrain_test
