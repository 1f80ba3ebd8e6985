// Typed HDF5 helpers: scalar attributes, groups, string and number datasets, dataset checks.
#include "data/hdf5_io.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "data/hdf5_handle.h"
#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

namespace {

// Variable-length UTF-8 strings: what cutrain writes (and h5py writes for Python str).
H5Handle vlen_string_type() {
  H5Handle t = h5_owned(H5Tcopy(H5T_C_S1), H5Tclose, "cannot make a string type");
  h5_check(H5Tset_size(t.get(), H5T_VARIABLE), "cannot make a string type");
  h5_check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "cannot make a string type");
  return t;
}

// "uint8", "int32", "float64", "string", ... for messages about a type we did not expect.
std::string describe_type(hid_t type) {
  const size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_STRING: return "string";
    default: return "a non-numeric type";
  }
}

H5Handle open_attribute(hid_t obj, const std::string& name, const std::string& where) {
  USER_CHECK(h5_has_attribute(obj, name),
             printable(where) << ": attribute '" << printable(name) << "' is missing");
  return h5_owned(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose,
                  printable(where) + ": cannot open attribute '" + printable(name) + "'");
}

// Opens a scalar attribute and checks that its type is of class `cls`.
H5Handle open_scalar_attribute(hid_t obj, const std::string& name, H5T_class_t cls,
                               const char* cls_name, const std::string& where) {
  H5Handle attr = open_attribute(obj, name, where);
  H5Handle space = h5_owned(H5Aget_space(attr.get()), H5Sclose,
                            printable(where) + ": attribute " + printable(name));
  USER_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1,
             printable(where) << ": attribute '" << printable(name) << "' should hold one value");
  H5Handle type = h5_owned(H5Aget_type(attr.get()), H5Tclose,
                           printable(where) + ": attribute " + printable(name));
  USER_CHECK(H5Tget_class(type.get()) == cls,
             printable(where) << ": attribute '" << printable(name) << "' is "
                              << describe_type(type.get()) << ", not " << cls_name);
  return attr;
}

void write_scalar_attribute(hid_t obj, const std::string& name, hid_t file_type,
                            hid_t mem_type, const void* value) {
  H5Handle space = h5_owned(H5Screate(H5S_SCALAR), H5Sclose, "cannot make a dataspace");
  H5Handle attr =
      h5_owned(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose, "cannot create attribute '" + printable(name) + "'");
  h5_check(H5Awrite(attr.get(), mem_type, value),
           "cannot write attribute '" + printable(name) + "'");
}

// Before a dataset of n variable-length strings is read (n from its dataspace, the file's
// word): each string takes a 16-byte reference [length u32][heap address u64][index u32], so n
// cannot pass the file's size / 16; and libhdf5 1.10 sizes each string's buffer from the
// length in its reference, zeroed, before it reads the string (a damaged length: up to 4 GiB,
// then an error; found by fuzz/). So the references of a contiguous dataset are read here
// first (other layouts are left to libhdf5). Returns what is wrong, or "".
std::string string_lengths_problem(hid_t ds, uint64_t n) {
  const H5Handle file(H5Iget_file_id(ds), H5Fclose);
  hsize_t file_size = 0, user_block = 0;
  if (n == 0 || !file.valid() || H5Fget_filesize(file.get(), &file_size) < 0) return "";
  if (n > file_size / 16)
    return std::to_string(n) + " strings, more than the file's " + std::to_string(file_size) +
           " bytes can hold";
  const haddr_t at = H5Dget_offset(ds);  // from the base address: after the user block
  const H5Handle fcpl(H5Fget_create_plist(file.get()), H5Pclose);
  if (at == HADDR_UNDEF || !fcpl.valid() || H5Pget_userblock(fcpl.get(), &user_block) < 0)
    return "";
  const ssize_t name_len = H5Fget_name(ds, nullptr, 0);
  std::string path(size_t(std::max<ssize_t>(name_len, 0)), '\0');
  H5Fget_name(ds, &path[0], path.size() + 1);
  std::ifstream f(path, std::ios::binary);
  std::vector<char> refs(16 * size_t(n));
  const uint64_t start = uint64_t(at) + user_block;
  if (!f || start > file_size || refs.size() > file_size - start ||
      !f.seekg(std::streamoff(start)) || !f.read(refs.data(), std::streamsize(refs.size())))
    return "the strings' references run past the end of the file";
  for (size_t i = 0; i < n; i++) {
    const uint8_t* r = reinterpret_cast<const uint8_t*>(refs.data()) + 16 * i;
    const uint64_t length = r[0] | uint64_t(r[1]) << 8 | uint64_t(r[2]) << 16 | uint64_t(r[3]) << 24;
    if (length > file_size)
      return "string " + std::to_string(i) + " claims " + std::to_string(length) +
             " bytes, more than the file's " + std::to_string(file_size);
  }
  return "";
}

}  // namespace

H5Handle h5_file_access() {
  H5Lock lock;
  H5Handle fapl = h5_owned(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file access properties");
  h5_check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI), "file access properties");
#if H5_VERSION_GE(1, 10, 7)
  h5_check(H5Pset_file_locking(fapl.get(), true, true), "file access properties");
#endif
  return fapl;
}

void h5_write_int_attribute(hid_t obj, const std::string& name, int64_t value,
                            hid_t file_type) {
  H5Lock lock;
  write_scalar_attribute(obj, name, file_type, H5T_NATIVE_INT64, &value);
}

void h5_write_uint_attribute(hid_t obj, const std::string& name, uint64_t value) {
  H5Lock lock;
  write_scalar_attribute(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void h5_write_string_attribute(hid_t obj, const std::string& name, const std::string& value) {
  H5Lock lock;
  H5Handle type = vlen_string_type();
  const char* p = value.c_str();
  write_scalar_attribute(obj, name, type.get(), type.get(), &p);
}

void h5_write_double_attribute(hid_t obj, const std::string& name, double value) {
  H5Lock lock;
  write_scalar_attribute(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

bool h5_has_attribute(hid_t obj, const std::string& name) {
  H5Lock lock;
  return H5Aexists(obj, name.c_str()) > 0;
}

int64_t h5_read_int_attribute(hid_t obj, const std::string& name, const std::string& where) {
  H5Lock lock;
  H5Handle attr = open_scalar_attribute(obj, name, H5T_INTEGER, "an integer", where);
  int64_t v = 0;
  h5_check(H5Aread(attr.get(), H5T_NATIVE_INT64, &v),
           printable(where) + ": cannot read attribute '" + printable(name) + "'");
  return v;
}

uint64_t h5_read_uint_attribute(hid_t obj, const std::string& name, const std::string& where) {
  H5Lock lock;
  H5Handle attr = open_scalar_attribute(obj, name, H5T_INTEGER, "an integer", where);
  uint64_t v = 0;
  h5_check(H5Aread(attr.get(), H5T_NATIVE_UINT64, &v),
           printable(where) + ": cannot read attribute '" + printable(name) + "'");
  return v;
}

std::string h5_read_string_attribute(hid_t obj, const std::string& name,
                                     const std::string& where) {
  H5Lock lock;
  H5Handle attr = open_scalar_attribute(obj, name, H5T_STRING, "a string", where);
  H5Handle type = h5_owned(H5Aget_type(attr.get()), H5Tclose,
                           printable(where) + ": attribute " + printable(name));
  const std::string what = printable(where) + ": cannot read attribute '" + printable(name) + "'";
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Handle mem = vlen_string_type();
    char* p = nullptr;
    h5_check(H5Aread(attr.get(), mem.get(), &p), what);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  // A fixed-length string (other writers): read the bytes, drop the padding. Its size is the
  // file's word: no larger than the file.
  const size_t bytes = H5Tget_size(type.get());
  hsize_t file_size = 0;
  {
    const H5Handle file(H5Iget_file_id(obj), H5Fclose);
    CHECK(file.valid() && H5Fget_filesize(file.get(), &file_size) >= 0 && bytes <= file_size,
          printable(where) << ": attribute '" << printable(name) << "' claims a string of " << bytes
                           << " bytes, more than the file's " << file_size);
  }
  std::string s(bytes, '\0');
  h5_check(H5Aread(attr.get(), type.get(), &s[0]), what);
  return s.substr(0, std::strlen(s.c_str()));
}

double h5_read_double_attribute(hid_t obj, const std::string& name, const std::string& where) {
  H5Lock lock;
  H5Handle attr = open_scalar_attribute(obj, name, H5T_FLOAT, "a float", where);
  double v = 0;
  h5_check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v),
           printable(where) + ": cannot read attribute '" + printable(name) + "'");
  return v;
}

std::vector<std::string> h5_attribute_names(hid_t obj, const std::string& where) {
  H5Lock lock;
  std::vector<std::string> names;
  auto add = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(name);
    return 0;
  };
  h5_check(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, add, &names),
           printable(where) + ": cannot list attributes");
  return names;
}

H5Handle h5_create_group(hid_t loc, const std::string& name) {
  H5Lock lock;
  return h5_owned(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                  "cannot create group '" + printable(name) + "'");
}

H5Handle h5_open_group(hid_t loc, const std::string& name, const std::string& where) {
  H5Lock lock;
  USER_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0,
             printable(where) << ": group '" << printable(name) << "' is missing");
  return h5_owned(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose,
                  printable(where) + ": '" + printable(name) + "' is not a group");
}

int64_t h5_group_size(hid_t group, const std::string& where) {
  H5Lock lock;
  H5G_info_t info;
  h5_check(H5Gget_info(group, &info), printable(where) + ": cannot read a group");
  return int64_t(info.nlinks);
}

void h5_write_strings(hid_t loc, const std::string& name,
                      const std::vector<std::string>& values) {
  H5Lock lock;
  H5Handle type = vlen_string_type();
  const hsize_t n = values.size();
  H5Handle space = h5_owned(H5Screate_simple(1, &n, nullptr), H5Sclose, "dataspace");
  H5Handle ds = h5_owned(
      H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose, "cannot create dataset '" + printable(name) + "'");
  if (n == 0) return;
  std::vector<const char*> ptrs;
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  h5_check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
           "cannot write dataset '" + printable(name) + "'");
}

std::vector<std::string> h5_read_strings(hid_t loc, const std::string& name,
                                         const std::string& where) {
  H5Lock lock;
  USER_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0,
             printable(where) << ": dataset '" << printable(name) << "' is missing");
  H5Handle ds = h5_owned(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose,
                         printable(where) + ": cannot open dataset '" + printable(name) + "'");
  H5Handle type =
      h5_owned(H5Dget_type(ds.get()), H5Tclose, printable(where) + ": dataset " + printable(name));
  H5Handle space =
      h5_owned(H5Dget_space(ds.get()), H5Sclose, printable(where) + ": dataset " + printable(name));
  USER_CHECK(H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) > 0 &&
                 H5Sget_simple_extent_ndims(space.get()) == 1,
             printable(where) << ": dataset '" << printable(name)
                              << "' should be a 1-D list of variable-length strings");
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  CHECK(n >= 0, printable(where) << ": dataset '" << printable(name) << "': cannot read its size");
  // Its size and its strings' lengths are the file's word: checked before they size anything.
  const std::string lengths = string_lengths_problem(ds.get(), uint64_t(n));
  CHECK(lengths.empty(), printable(where)
                             << ": dataset '" << printable(name) << "' is damaged: " << lengths);
  std::vector<char*> ptrs(size_t(n), nullptr);
  if (ptrs.empty()) return {};
  H5Handle mem = vlen_string_type();
  h5_check(H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
           printable(where) + ": cannot read dataset '" + printable(name) + "'");
  std::vector<std::string> out;
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
  return out;
}

void h5_write_vector(hid_t loc, const std::string& name, const void* data, int64_t n,
                     hid_t mem_type, hid_t file_type) {
  h5_write_array(loc, name, data, {hsize_t(n)}, mem_type, file_type);
}

H5Handle h5_float16_type() {
  H5Lock lock;
  // binary16: sign bit 15, exponent bits 10-14 (bias 15), mantissa bits 0-9. Derived from the
  // 32-bit IEEE type as h5py does: shrink the precision first, then the size.
  const std::string what = "cannot make a float16 type";
  H5Handle t = h5_owned(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, what);
  h5_check(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), what);
  h5_check(H5Tset_precision(t.get(), 16), what);
  h5_check(H5Tset_size(t.get(), 2), what);
  h5_check(H5Tset_ebias(t.get(), 15), what);
  return t;
}

H5Handle h5_write_array(hid_t loc, const std::string& name, const void* data,
                        const std::vector<hsize_t>& dims, hid_t mem_type, hid_t file_type) {
  H5Lock lock;
  H5Handle space = dims.empty()
                       ? h5_owned(H5Screate(H5S_SCALAR), H5Sclose, "dataspace")
                       : h5_owned(H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                                  H5Sclose, "dataspace");
  H5Handle ds = h5_owned(
      H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose, "cannot create dataset '" + printable(name) + "'");
  if (H5Sget_simple_extent_npoints(space.get()) == 0) return ds;
  h5_check(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
           "cannot write dataset '" + printable(name) + "'");
  return ds;
}

H5Handle h5_open_dataset(hid_t loc, const std::string& name, const std::string& where) {
  H5Lock lock;
  USER_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0,
             printable(where) << ": dataset '" << printable(name) << "' is missing");
  return h5_owned(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose,
                  printable(where) + ": '" + printable(name) + "' is not a dataset");
}

H5DatasetInfo h5_dataset_info(hid_t dataset, const std::string& where) {
  H5Lock lock;
  H5DatasetInfo info;
  info.type = h5_owned(H5Dget_type(dataset), H5Tclose, printable(where) + ": dataset type");
  const hid_t t = info.type.get();
  info.type_class = H5Tget_class(t);
  info.type_bytes = H5Tget_size(t);
  info.is_signed = info.type_class == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
  info.type_name = describe_type(t);
  H5Handle space = h5_owned(H5Dget_space(dataset), H5Sclose, printable(where) + ": dataset shape");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  USER_CHECK(rank >= 0, printable(where) << ": cannot read a dataset's shape");
  info.dims.resize(size_t(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), info.dims.data(), nullptr);
  return info;
}

void h5_read_array(hid_t dataset, hid_t mem_type, void* out, const std::string& what) {
  H5Lock lock;
  h5_check(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), what);
}

std::vector<hsize_t> h5_check_int_dataset(hid_t loc, const std::string& name,
                                          const IntDatasetRule& rule,
                                          const std::string& where) {
  H5Lock lock;
  USER_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0,
             printable(where) << ": dataset '" << printable(name) << "' is missing");
  H5Handle ds = h5_owned(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose,
                         printable(where) + ": '" + printable(name) + "' is not a dataset");
  H5Handle type =
      h5_owned(H5Dget_type(ds.get()), H5Tclose, printable(where) + ": dataset " + printable(name));
  const std::string want = (rule.is_signed ? "int" : "uint") + std::to_string(8 * rule.bytes);
  const bool type_ok = H5Tget_class(type.get()) == H5T_INTEGER &&
                       H5Tget_size(type.get()) == size_t(rule.bytes) &&
                       (H5Tget_sign(type.get()) == H5T_SGN_2) == rule.is_signed;
  USER_CHECK(type_ok, printable(where) << ": dataset '" << printable(name) << "' is "
                                       << describe_type(type.get()) << ", expected " << want);
  H5Handle space =
      h5_owned(H5Dget_space(ds.get()), H5Sclose, printable(where) + ": dataset " + printable(name));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  USER_CHECK(rank == rule.rank, printable(where) << ": dataset '" << printable(name) << "' has "
                                                 << rank << " dimensions, expected " << rule.rank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

}  // namespace cutrain
