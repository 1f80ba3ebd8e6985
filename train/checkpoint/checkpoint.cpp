// Checkpoint files: validation, the checksum, writing and reading (the layout is in
// train/checkpoint/checkpoint.h). The writer and the reader make the HDF5 calls through
// data/hdf5_io.h, whose helpers each take the process-wide HDF5 lock for one call only: the
// hashing, the slow part that needs no HDF5, runs without it, so a loader reading a pack on another
// thread is held up for the file I/O alone.
#include "train/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "data/atomic_file.h"
#include "data/hdf5_io.h"
#include "data/trace.h"
#include "kernels/check.h"
#include "kernels/printable.h"
#include "kernels/xxhash64.h"

namespace cutrain {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoints store little-endian bytes and hash them as they are in memory");

// The HDF5 type of a dtype, used both in memory and in the file: on a little-endian host they
// are the same, so HDF5 converts nothing and the bytes pass through exactly.
H5Handle h5_type(DType d) {
  if (d == DType::f16) return h5_float16_type();
  H5Lock lock;
  const hid_t base = d == DType::f32   ? H5T_IEEE_F32LE
                     : d == DType::f64 ? H5T_IEEE_F64LE
                                       : H5T_STD_I32LE;
  return h5_owned(H5Tcopy(base), H5Tclose, "cannot copy an HDF5 type");
}

// The dtype of a stored tensor, or an error naming what it is instead.
DType dtype_of_dataset(const H5DatasetInfo& info, const std::string& where) {
  if (info.type_class == H5T_FLOAT && info.type_bytes == 4) return DType::f32;
  if (info.type_class == H5T_FLOAT && info.type_bytes == 8) return DType::f64;
  if (info.type_class == H5T_INTEGER && info.type_bytes == 4 && info.is_signed) return DType::i32;
  if (info.type_class == H5T_FLOAT && info.type_bytes == 2) {
    H5Handle half = h5_float16_type();
    H5Lock lock;
    if (H5Tequal(info.type.get(), half.get()) > 0) return DType::f16;
  }
  USER_CHECK(false, where << " is " << info.type_name
                          << ", not one of the types cutrain stores (f32, f16, f64, i32)");
  return DType::f32;
}

// The canonical record of checkpoint_checksum, built up field by field.
struct Record {
  std::string bytes;
  void u64(uint64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    bytes.append(b, 8);
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes += s;
  }
};

std::vector<uint64_t> tensor_hashes(const Checkpoint& c) {
  std::vector<uint64_t> h;
  for (const auto& nt : c.tensors) h.push_back(xxh64(nt.second.raw(), nt.second.bytes()));
  return h;
}

// All the HDF5 work of write_checkpoint, in memory (HDF5's core driver without a backing
// store): the bytes of the file. HDF5 never touches the disk here, so a full disk or a bad
// folder is met by write_file_atomically, which names the path and the system's reason, and
// no HDF5 object is ever left open by a failed write. `name` names the file inside HDF5.
std::vector<char> file_image(const Checkpoint& c, const std::vector<uint64_t>& hashes,
                             uint64_t checksum, const std::string& name) {
  H5Handle file;
  {
    H5Lock lock;
    H5Handle fapl = h5_file_access();
    // Grown in steps of the tensors' size: a few reallocations, not one per MiB.
    size_t bytes = size_t(1) << 20;
    for (const auto& nt : c.tensors) bytes += nt.second.bytes();
    h5_check(H5Pset_fapl_core(fapl.get(), bytes, false), "file access properties");
    file = h5_owned(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                    "cannot create the checkpoint in memory");
  }
  std::vector<std::string> names;
  {
    H5Handle group = h5_create_group(file.get(), "tensors");
    for (size_t i = 0; i < c.tensors.size(); i++) {
      const auto& [name, t] = c.tensors[i];
      const std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      H5Handle type = h5_type(t.dtype());
      H5Handle ds = h5_write_array(group.get(), name, t.raw(), dims, type.get(), type.get());
      h5_write_uint_attribute(ds.get(), "xxh64", hashes[i]);
      names.push_back(name);
    }
  }
  h5_write_strings(file.get(), "tensor_names", names);
  {
    H5Handle group = h5_create_group(file.get(), "scalars");
    for (const auto& [name, value] : c.scalars) h5_write_double_attribute(group.get(), name, value);
  }
  const hid_t root = file.get();
  h5_write_string_attribute(root, "format", kCheckpointFormat);
  h5_write_int_attribute(root, "version", kCheckpointVersion, H5T_STD_I32LE);
  h5_write_int_attribute(root, "step", c.step, H5T_STD_I64LE);
  h5_write_int_attribute(root, "epoch", c.epoch, H5T_STD_I64LE);
  h5_write_int_attribute(root, "cursor_epoch", c.cursor.epoch, H5T_STD_I64LE);
  h5_write_int_attribute(root, "cursor_batch", c.cursor.batch, H5T_STD_I64LE);
  h5_write_uint_attribute(root, "seed", c.seed);
  h5_write_string_attribute(root, "config_json", c.config_json);
  if (!c.data_fingerprint.empty())
    h5_write_string_attribute(root, "data_fingerprint", c.data_fingerprint);
  h5_write_uint_attribute(root, "checksum", checksum);
  std::vector<char> bytes;
  {
    H5Lock lock;
    h5_check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot finish the checkpoint in memory");
    const ssize_t n = H5Fget_file_image(file.get(), nullptr, 0);
    h5_check(herr_t(n < 0 ? -1 : 0), "cannot read the checkpoint's image");
    bytes.resize(size_t(n));
    h5_check(herr_t(H5Fget_file_image(file.get(), bytes.data(), bytes.size()) == n ? 0 : -1),
             "cannot read the checkpoint's image");
  }
  CHECK(file.close(), "cannot close the checkpoint in memory: " << h5_error_text());
  return bytes;
}

// Reads the tensors listed in /tensor_names, with the hashes stored beside them. The names are
// the file's word (a damaged or crafted file's bytes): messages quote them printable.
void read_tensors(hid_t file, const std::string& path, int64_t file_bytes, Checkpoint& c,
                  std::vector<uint64_t>& stored_hashes) {
  const std::vector<std::string> names = h5_read_strings(file, "tensor_names", path);
  H5Handle group = h5_open_group(file, "tensors", path);
  const int64_t stored = h5_group_size(group.get(), path);
  USER_CHECK(stored == int64_t(names.size()),
             printable(path) << ": group 'tensors' holds " << stored
                             << " datasets, but 'tensor_names' lists " << names.size());
  for (const std::string& name : names) {
    const std::string where = printable(path) + ": tensor '" + printable(name) + "'";
    H5Handle ds = h5_open_dataset(group.get(), name, path);
    const H5DatasetInfo info = h5_dataset_info(ds.get(), where);
    const DType dtype = dtype_of_dataset(info, where);
    Shape shape;
    double bytes = double(dtype_size(dtype));
    for (hsize_t d : info.dims) {
      USER_CHECK(d <= hsize_t(INT_MAX), where << " has a dimension of " << d);
      shape.push_back(int(d));
      bytes *= double(d);
    }
    // Contiguous and unfiltered: a tensor cannot be larger than its file. (Checked before the
    // allocation, so a damaged shape is an error, not an attempt to allocate petabytes.)
    USER_CHECK(bytes <= double(file_bytes), where << " claims " << shape_str(shape)
                                             << ", more than the file's " << file_bytes
                                             << " bytes");
    Tensor t = Tensor::empty(shape, dtype);
    if (t.numel() > 0) {
      H5Handle type = h5_type(dtype);
      h5_read_array(ds.get(), type.get(), t.raw(), "cannot read " + where);
    }
    stored_hashes.push_back(h5_read_uint_attribute(ds.get(), "xxh64", where));
    c.tensors.emplace_back(name, std::move(t));
  }
}

}  // namespace

void Checkpoint::complete() {
  if (!pending) return;
  // Cleared first: a completion that throws is not run twice on a half-completed checkpoint.
  const std::function<void(Checkpoint&)> finish = std::move(pending);
  pending = nullptr;
  finish(*this);
}

const Tensor& Checkpoint::tensor(const std::string& name) const {
  for (const auto& nt : tensors)
    if (nt.first == name) return nt.second;
  USER_CHECK(false, "the checkpoint has no tensor '" << printable(name) << "'");
  return tensors.front().second;
}

void validate_checkpoint(const Checkpoint& c) {
  CHECK(!c.pending, "the checkpoint of step " << c.step << " is still pending (on its way from "
                                                "a GPU): complete() it first");
  std::set<std::string> seen;
  for (const auto& [name, t] : c.tensors) {
    CHECK(!name.empty(), "a checkpoint tensor has an empty name");
    CHECK(name.find('\0') == std::string::npos, "a checkpoint tensor name contains a NUL");
    CHECK(name.find('/') == std::string::npos && name != ".",
          "checkpoint tensor name '" << name << "' is refused (no '/', and not \".\")");
    CHECK(seen.insert(name).second, "two checkpoint tensors are named '" << name << "'");
    CHECK(t.defined(), "checkpoint tensor '" << name << "' is undefined");
    CHECK(t.device() == Device::cpu, "checkpoint tensor '" << name << "' is on "
                                         << device_name(t.device())
                                         << "; snapshot it to the CPU first");
  }
  for (const auto& nv : c.scalars) {
    CHECK(!nv.first.empty(), "a checkpoint scalar has an empty name");
    CHECK(nv.first.find('\0') == std::string::npos,
          "checkpoint scalar name '" << nv.first << "' contains a NUL");
  }
  CHECK(c.step >= 0 && c.epoch >= 0 && c.cursor.epoch >= 0 && c.cursor.batch >= 0,
        "checkpoint step " << c.step << ", epoch " << c.epoch << ", cursor "
                           << cursor_to_string(c.cursor) << ": none may be negative");
  CHECK(c.config_json.find('\0') == std::string::npos, "the checkpoint's config_json has a NUL");
  CHECK(c.data_fingerprint.find('\0') == std::string::npos,
        "the checkpoint's data_fingerprint has a NUL");
}

uint64_t checkpoint_checksum(const Checkpoint& c, const std::vector<uint64_t>& tensor_hashes,
                             int version) {
  CHECK(tensor_hashes.size() == c.tensors.size(),
        tensor_hashes.size() << " hashes for " << c.tensors.size() << " tensors");
  Record r;
  r.str(kCheckpointFormat);
  r.u64(uint64_t(version));
  r.str(c.config_json);
  for (int64_t v : {c.step, c.epoch, c.cursor.epoch, c.cursor.batch}) r.u64(uint64_t(v));
  r.u64(c.seed);
  r.u64(c.scalars.size());
  for (const auto& [name, value] : c.scalars) {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    r.str(name);
    r.u64(bits);
  }
  r.u64(c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); i++) {
    const Tensor& t = c.tensors[i].second;
    r.str(c.tensors[i].first);
    r.str(dtype_name(t.dtype()));
    r.u64(uint64_t(t.rank()));
    for (int d : t.shape()) r.u64(uint64_t(d));
    r.u64(tensor_hashes[i]);
  }
  // Last and only when there is one: checkpoints written before it existed still verify.
  if (!c.data_fingerprint.empty()) r.str(c.data_fingerprint);
  return xxh64(r.bytes.data(), r.bytes.size());
}

void write_checkpoint(const Checkpoint& c, const std::string& path, Tracer* tracer) {
  validate_checkpoint(c);
  CHECK(!path.empty(), "no path for the checkpoint");
  std::error_code ec;
  USER_CHECK(!std::filesystem::is_directory(path, ec),
        "'" << path << "' is a folder, not a checkpoint file");
  std::vector<uint64_t> hashes;
  uint64_t checksum = 0;
  {
    TraceSpan span(tracer, "hash", "checkpoint");
    hashes = tensor_hashes(c);
    checksum = checkpoint_checksum(c, hashes);
  }
  std::vector<char> bytes;
  {
    TraceSpan span(tracer, "hdf5", "checkpoint");
    try {
      bytes = file_image(c, hashes, checksum, path);
    } catch (const Error& e) {
      rethrow_with_context(e, "cannot write checkpoint '" + path + "'");
    }
  }
  TraceSpan span(tracer, "write + fsync + rename", "checkpoint");
  write_file_atomically(path, bytes.data(), bytes.size());
}

Checkpoint read_checkpoint(const std::string& path) {
  // The path (the command line's, or a run folder's file) is quoted printable in messages.
  const std::string shown = printable(path);
  struct stat st;
  USER_CHECK(::stat(path.c_str(), &st) == 0,
             "cannot open checkpoint '" << shown << "': " << std::strerror(errno));
  USER_CHECK(S_ISREG(st.st_mode), "cannot open checkpoint '" << shown << "': not a regular file");
  H5Handle file;
  {
    H5Lock lock;
    USER_CHECK(H5Fis_hdf5(path.c_str()) > 0,
               "'" << shown << "' is not an HDF5 file, so not a cutrain checkpoint");
    file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5_file_access().get()), H5Fclose,
                    "cannot open checkpoint '" + shown + "'");
  }
  const hid_t root = file.get();
  USER_CHECK(h5_has_attribute(root, "format") &&
                 h5_read_string_attribute(root, "format", path) == kCheckpointFormat,
             "'" << shown << "' is an HDF5 file but not a cutrain checkpoint (no format = \""
                 << kCheckpointFormat << "\" attribute)");
  const int64_t version = h5_read_int_attribute(root, "version", path);
  USER_CHECK(version >= 1 && version <= kCheckpointVersion,
             shown << ": checkpoint format version " << version
                   << ", but this cutrain reads versions 1 to " << kCheckpointVersion
                   << ": a newer cutrain wrote it");
  Checkpoint c;
  c.step = h5_read_int_attribute(root, "step", path);
  c.epoch = h5_read_int_attribute(root, "epoch", path);
  c.cursor.epoch = h5_read_int_attribute(root, "cursor_epoch", path);
  c.cursor.batch = h5_read_int_attribute(root, "cursor_batch", path);
  c.seed = h5_read_uint_attribute(root, "seed", path);
  c.config_json = h5_read_string_attribute(root, "config_json", path);
  if (h5_has_attribute(root, "data_fingerprint"))
    c.data_fingerprint = h5_read_string_attribute(root, "data_fingerprint", path);
  const uint64_t stored_checksum = h5_read_uint_attribute(root, "checksum", path);
  {
    H5Handle group = h5_open_group(root, "scalars", path);
    for (const std::string& name : h5_attribute_names(group.get(), path))
      c.scalars[name] = h5_read_double_attribute(group.get(), name, path + ": scalars");
  }
  std::vector<uint64_t> stored_hashes;
  read_tensors(root, path, int64_t(st.st_size), c, stored_hashes);
  file.close();

  // Verification, after the file is closed and without the HDF5 lock: hash what was read.
  const std::vector<uint64_t> hashes = tensor_hashes(c);
  if (checkpoint_checksum(c, hashes, int(version)) != stored_checksum) {
    std::string which = "its metadata differ from what was written";
    for (size_t i = 0; i < hashes.size(); i++)
      if (hashes[i] != stored_hashes[i]) {
        which = "the bytes of tensor '" + printable(c.tensors[i].first) +
                "' differ from what was written";
        break;
      }
    USER_CHECK(false, "checksum mismatch: " << shown << " is damaged (" << which << ")");
  }
  return c;
}

}  // namespace cutrain
