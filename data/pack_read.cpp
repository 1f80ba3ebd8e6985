// Reading packs: opening and validating one, read_pack_info, PackSource.
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "data/hdf5_io.h"
#include "data/pack.h"
#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Opens `path` read-only and checks, in the order a user would want to hear about it, that it
// is a file, an HDF5 file, a cutrain pack, of our version, with every dataset of the right
// type and shape. Fills `info`; returns the open file.
H5Handle open_pack(const std::string& path, PackInfo& info) {
  struct stat st;
  USER_CHECK(::stat(path.c_str(), &st) == 0,
             "cannot open pack '" << printable(path) << "': " << std::strerror(errno));
  USER_CHECK(S_ISREG(st.st_mode),
             "cannot open pack '" << printable(path) << "': not a regular file");
  H5Lock lock;
  USER_CHECK(H5Fis_hdf5(path.c_str()) > 0,
             "'" << printable(path)
                 << "' is not an HDF5 file, so not a pack (make one with `cutrain pack`)");
  H5Handle file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5_file_access().get()), H5Fclose,
                           "cannot open pack '" + printable(path) + "'");
  const hid_t root = file.get();
  const std::string& where = path;
  USER_CHECK(h5_has_attribute(root, "format") &&
                 h5_read_string_attribute(root, "format", where) == kPackFormat,
             "'" << printable(path) << "' is an HDF5 file but not a cutrain pack (no format = \""
                 << kPackFormat << "\" attribute)");

  info.path = path;
  const int64_t version = h5_read_int_attribute(root, "version", where);
  USER_CHECK(version == kPackVersion, printable(path)
                                          << ": pack format version " << version
                                          << ", but this cutrain reads version " << kPackVersion
                                          << "; make the pack again with `cutrain pack`");
  info.version = int(version);
  const int64_t size = h5_read_int_attribute(root, "size", where);
  const int64_t channels = h5_read_int_attribute(root, "channels", where);
  USER_CHECK(size >= 1 && size <= (1 << 16), printable(path) << ": bad attribute size = " << size);
  USER_CHECK(channels == 1 || channels == 3,
             printable(path) << ": bad attribute channels = " << channels << " (1 or 3)");
  info.size = int(size);
  info.channels = int(channels);
  info.source = h5_read_string_attribute(root, "source", where);
  info.source_hash = h5_read_uint_attribute(root, "source_hash", where);
  info.source_count = h5_read_int_attribute(root, "source_count", where);

  const std::vector<hsize_t> dims = h5_check_int_dataset(root, "images", {1, false, 4}, where);
  USER_CHECK(dims[1] == hsize_t(size) && dims[2] == hsize_t(size) && dims[3] == hsize_t(channels),
             printable(path) << ": dataset 'images' is (" << dims[0] << ", " << dims[1] << ", "
                             << dims[2] << ", " << dims[3] << "), but the attributes say " << size
                             << "x" << size << "x" << channels << " images");
  USER_CHECK(dims[0] >= 1, printable(path) << ": the pack holds no images");
  // The sizes are the file's word, and they size allocations: the pixels (uncompressed, every
  // chunk written), the labels and the source indices (12 bytes an image) must fit in it.
  const uint64_t per_image = uint64_t(size) * uint64_t(size) * uint64_t(channels) + 12;
  USER_CHECK(dims[0] <= uint64_t(st.st_size) / per_image,
             printable(path) << ": the pack claims " << dims[0] << " images of " << size << "x"
                             << size << "x" << channels << ", more than its " << st.st_size
                             << " bytes can hold");
  info.count = int64_t(dims[0]);
  for (const char* name : {"labels", "source_index"}) {
    const bool is_labels = std::strcmp(name, "labels") == 0;
    const IntDatasetRule rule{is_labels ? 4 : 8, true, 1};
    const std::vector<hsize_t> n = h5_check_int_dataset(root, name, rule, where);
    USER_CHECK(n[0] == dims[0], printable(path) << ": dataset '" << name << "' has " << n[0]
                                                << " entries for " << dims[0] << " images");
  }
  info.class_names = h5_read_strings(root, "class_names", where);
  info.bad_files = h5_read_strings(root, "bad_files", where);
  info.bad_reasons = h5_read_strings(root, "bad_reasons", where);
  USER_CHECK(info.bad_files.size() == info.bad_reasons.size(),
             printable(path) << ": 'bad_files' and 'bad_reasons' differ in length");
  return file;
}

// Reads a whole 1-D dataset of n numbers into `out` (converted to mem_type).
void read_vector(hid_t file, const char* name, hid_t mem_type, void* out,
                 const std::string& where) {
  H5Lock lock;
  H5Handle ds = h5_owned(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose,
                         where + ": cannot open dataset '" + name + "'");
  h5_check(H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
           where + ": cannot read dataset '" + name + "'");
}

ImageSpec stored_spec(const std::string& path) {
  const PackInfo info = read_pack_info(path);
  ImageSpec spec;
  spec.size = info.size;
  spec.channels = info.channels;
  return spec;
}

}  // namespace

PackInfo read_pack_info(const std::string& path) {
  PackInfo info;
  open_pack(path, info);
  return info;
}

PackSource::PackSource(const std::string& path) : PackSource(path, stored_spec(path)) {}

PackSource::PackSource(const std::string& path, const ImageSpec& spec,
                       int64_t max_in_memory_bytes)
    : spec_(spec) {
  check_image_spec(spec);
  file_ = open_pack(path, info_);
  USER_CHECK(spec.size <= info_.size, printable(path)
                                          << ": the loader wants " << spec.size << "x" << spec.size
                                          << " images, larger than the pack's " << info_.size << "x"
                                          << info_.size << " (make the pack with --size "
                                          << spec.size << " or more)");
  USER_CHECK(spec.channels == info_.channels, printable(path)
                                                  << ": the loader wants " << spec.channels
                                                  << "-channel images, the pack holds "
                                                  << info_.channels << "-channel ones");
  USER_CHECK(spec.resize == 0 || spec.resize == info_.size,
             printable(path) << ": a pack's images are already resized to " << info_.size
                             << "; resize must be 0 or " << info_.size << ", not " << spec.resize);
  stored_bytes_ = size_t(info_.size) * size_t(info_.size) * size_t(info_.channels);

  H5Lock lock;
  labels_.resize(size_t(info_.count));
  source_index_.resize(size_t(info_.count));
  read_vector(file_.get(), "labels", H5T_NATIVE_INT32, labels_.data(), path);
  read_vector(file_.get(), "source_index", H5T_NATIVE_INT64, source_index_.data(), path);
  const int64_t classes = int64_t(info_.class_names.size());
  for (size_t i = 0; i < labels_.size(); i++) {
    USER_CHECK(labels_[i] >= 0 && (classes == 0 || labels_[i] < classes),
               printable(path) << ": image " << i << " has label " << labels_[i] << ", outside [0, "
                               << (classes ? std::to_string(classes) : "inf") << ")");
  }
  images_ = h5_owned(H5Dopen2(file_.get(), "images", H5P_DEFAULT), H5Dclose,
                     printable(path) + ": cannot open dataset 'images'");
  if (int64_t(stored_bytes_) * info_.count <= max_in_memory_bytes) {
    pixels_.resize(stored_bytes_ * size_t(info_.count));
    h5_check(
        H5Dread(images_.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixels_.data()),
        printable(path) + ": cannot read dataset 'images'");
    images_.close();  // everything is in memory: the file is not needed any more
    file_.close();
  }
}

std::string PackSource::name(int64_t i) const {
  return info_.path + "[" + std::to_string(i) + "]";
}

std::string PackSource::read_stored(int64_t i, uint8_t* out) const {
  H5Lock lock;
  const hsize_t start[4] = {hsize_t(i), 0, 0, 0};
  const hsize_t count[4] = {1, hsize_t(info_.size), hsize_t(info_.size),
                            hsize_t(info_.channels)};
  const hid_t space = H5Dget_space(images_.get());
  const hid_t mem = H5Screate_simple(4, count, nullptr);
  const H5Handle space_owner(space, H5Sclose), mem_owner(mem, H5Sclose);
  const bool ok =
      space >= 0 && mem >= 0 &&
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
      H5Dread(images_.get(), H5T_NATIVE_UINT8, mem, space, H5P_DEFAULT, out) >= 0;
  // Taken now, under the lock: the next H5 call of any thread clears HDF5's error stack.
  return ok ? "" : "HDF5: " + h5_error_text();
}

DecodeResult PackSource::load(int64_t i, uint64_t aug_key, uint8_t* out, InputCrop& window,
                              StageTimes& t) const {
  CHECK(i >= 0 && i < info_.count, name(i) << ": index outside [0, " << info_.count << ")");
  const uint8_t* stored = nullptr;
  thread_local std::vector<uint8_t> buffer;  // one stored image, per worker thread
  if (in_memory()) {
    stored = pixels_.data() + size_t(i) * stored_bytes_;
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    buffer.resize(stored_bytes_);
    const std::string error = read_stored(i, buffer.data());
    if (!error.empty()) {
      DecodeResult r;
      r.error = ImageError::corrupt;
      r.message = name(i) + ": cannot read the image from the pack: " + error;
      return r;
    }
    stored = buffer.data();
    t.read_s += seconds_since(t0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  augment_square_uncut(stored, info_.size, info_.channels, spec_, aug_key, out, window);
  t.augment_s += seconds_since(t0);
  return DecodeResult{};
}

}  // namespace cutrain
