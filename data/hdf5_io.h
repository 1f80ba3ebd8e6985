// defines: small typed helpers over the HDF5 C API, for the pack (and later the checkpoint):
// scalar attributes (integers and UTF-8 strings), 1-D datasets of strings and of numbers, and
// the checks a reader makes before trusting a dataset (its type class, size, sign and shape).
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

bool h5_has_attribute(hid_t obj, const std::string& name);
// Each throws when the attribute is missing, not a scalar, or of another type class.
int64_t h5_read_int_attribute(hid_t obj, const std::string& name, const std::string& where);
uint64_t h5_read_uint_attribute(hid_t obj, const std::string& name, const std::string& where);
std::string h5_read_string_attribute(hid_t obj, const std::string& name,
                                     const std::string& where);

// ---- 1-D datasets ----------------------------------------------------------------------------

// A contiguous 1-D dataset of variable-length UTF-8 strings (may be empty: shape (0)).
void h5_write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> h5_read_strings(hid_t loc, const std::string& name,
                                         const std::string& where);

// A contiguous 1-D dataset of n numbers: `data` is in mem_type (H5T_NATIVE_INT32, ...),
// stored as file_type (H5T_STD_I32LE, ...).
void h5_write_vector(hid_t loc, const std::string& name, const void* data, int64_t n,
                     hid_t mem_type, hid_t file_type);

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
