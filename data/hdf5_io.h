// defines: small typed helpers over the HDF5 C API, for the pack and the checkpoints: scalar
// attributes (integers, floats and UTF-8 strings), groups, 1-D datasets of strings and of
// numbers, n-dimensional numeric datasets (IEEE half included), and the checks a reader makes
// before trusting a dataset (its type class, size, sign and shape).
//
// Every helper takes the lock itself (H5Lock) and throws cutrain::Error on failure, with
// `where` (usually the file's path) at the front of the message, so an error always says which
// file was wrong: "/data/fmnist.h5: attribute 'size' is missing".
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"

namespace cutrain {

// File access properties for H5Fcreate / H5Fopen:
//  - close degree SEMI: H5Fclose fails, rather than silently postponing the close until the
//    last object is closed, when a dataset or attribute is still open. A writer that checks
//    H5Fclose then knows the file is really complete.
//  - file locking (HDF5 >= 1.10.7) is used where the file system supports it and skipped
//    where it does not (some network file systems), instead of failing to open.
H5Handle h5_file_access();

// ---- attributes (scalars, on a file's root group or any object) ------------------------------

// file_type: how the value is stored, e.g. H5T_STD_I32LE, H5T_STD_U64LE. HDF5 converts.
void h5_write_int_attribute(hid_t obj, const std::string& name, int64_t value, hid_t file_type);
void h5_write_uint_attribute(hid_t obj, const std::string& name, uint64_t value);  // U64LE
void h5_write_string_attribute(hid_t obj, const std::string& name, const std::string& value);
void h5_write_double_attribute(hid_t obj, const std::string& name, double value);  // F64LE

bool h5_has_attribute(hid_t obj, const std::string& name);
// Each throws when the attribute is missing, not a scalar, or of another type class.
int64_t h5_read_int_attribute(hid_t obj, const std::string& name, const std::string& where);
uint64_t h5_read_uint_attribute(hid_t obj, const std::string& name, const std::string& where);
std::string h5_read_string_attribute(hid_t obj, const std::string& name,
                                     const std::string& where);
double h5_read_double_attribute(hid_t obj, const std::string& name, const std::string& where);
// The names of all of obj's attributes, in HDF5's name order.
std::vector<std::string> h5_attribute_names(hid_t obj, const std::string& where);

// ---- groups ----------------------------------------------------------------------------------

H5Handle h5_create_group(hid_t loc, const std::string& name);
// Throws "<where>: group '<name>' is missing" when there is none.
H5Handle h5_open_group(hid_t loc, const std::string& name, const std::string& where);
// How many links (datasets, groups) the group holds.
int64_t h5_group_size(hid_t group, const std::string& where);

// ---- 1-D datasets ----------------------------------------------------------------------------

// A contiguous 1-D dataset of variable-length UTF-8 strings (may be empty: shape (0)).
void h5_write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> h5_read_strings(hid_t loc, const std::string& name,
                                         const std::string& where);

// A contiguous 1-D dataset of n numbers: `data` is in mem_type (H5T_NATIVE_INT32, ...),
// stored as file_type (H5T_STD_I32LE, ...).
void h5_write_vector(hid_t loc, const std::string& name, const void* data, int64_t n,
                     hid_t mem_type, hid_t file_type);

// ---- n-dimensional datasets ------------------------------------------------------------------

// IEEE 754 binary16, little-endian: what h5py writes for numpy's float16 (HDF5 1.10 has no
// predefined half type). Written and read as itself, so the bits pass through unconverted.
H5Handle h5_float16_type();

// A contiguous dataset of shape `dims` (empty: a scalar dataspace, rank 0; a dimension may be
// 0) holding `data` in mem_type, stored as file_type. Returns the dataset, for its attributes.
H5Handle h5_write_array(hid_t loc, const std::string& name, const void* data,
                        const std::vector<hsize_t>& dims, hid_t mem_type, hid_t file_type);

// Throws "<where>: dataset '<name>' is missing" (or is not a dataset).
H5Handle h5_open_dataset(hid_t loc, const std::string& name, const std::string& where);

// What a dataset holds: its stored type and its shape (dims empty for a scalar dataspace).
struct H5DatasetInfo {
  H5Handle type;           // the stored type, for H5Tequal
  H5T_class_t type_class;  // H5T_INTEGER, H5T_FLOAT, ...
  size_t type_bytes;
  bool is_signed;          // integers
  std::string type_name;   // "int32", "float16", "string", ... for messages
  std::vector<hsize_t> dims;
};
H5DatasetInfo h5_dataset_info(hid_t dataset, const std::string& where);

// Reads the whole dataset into `out`, converted to mem_type (no conversion when mem_type equals
// the stored type). `what` leads the error message.
void h5_read_array(hid_t dataset, hid_t mem_type, void* out, const std::string& what);

// ---- checking what a file holds --------------------------------------------------------------

// What a dataset must be: an integer type of `bytes` bytes with the given sign, and `rank`
// dimensions. h5_check_int_dataset throws, naming the dataset and what it found, when it is missing
// or differs, and returns its dimensions.
struct IntDatasetRule {
  int bytes;
  bool is_signed;
  int rank;
};
std::vector<hsize_t> h5_check_int_dataset(hid_t loc, const std::string& name,
                                          const IntDatasetRule& rule, const std::string& where);

}  // namespace cutrain
