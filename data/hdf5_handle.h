// defines: H5Handle (a move-only owner of one HDF5 identifier, closed by the H5*close that
// matches the call that made it), h5_owned() (take an id from an H5*create/open call, throwing
// when the call failed), H5Lock (the process-wide lock every HDF5 call is made under) and
// h5_error_text() (HDF5's own message for the last failure).
//
// Why one lock for the whole process: the serial HDF5 build (Debian's libhdf5-dev) is not
// thread-safe. No two threads may be inside the library at the same time, whatever files they
// touch, so a lock per file would not do. Every H5 call in cutrain runs under H5Lock, including
// the closes H5Handle makes. The lock is recursive, so code holding it may call helpers that
// take it again, and a handle may be destroyed with or without it held.
//
// The first H5Lock of each thread also turns off HDF5's habit of printing its error stack to
// stderr (in each thread: a build with H5_HAVE_THREADSAFE keeps that setting per thread), so
// failures become cutrain::Error messages that name the file, with h5_error_text() for the
// detail.
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>

namespace cutrain {

// The lock itself. Prefer H5Lock.
std::recursive_mutex& hdf5_mutex();

class H5Lock {
 public:
  H5Lock() : guard_(hdf5_mutex()) {}

 private:
  std::lock_guard<std::recursive_mutex> guard_;
};

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);  // H5Fclose, H5Dclose, H5Sclose, H5Tclose, H5Aclose, ...

  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Handle() { close(); }

  // Move-only: a copy would close the same id twice.
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      close();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

  // Closes now (a no-op when empty). Returns false when the close failed: for a file that
  // means its data may not all have been written, so writers check it.
  bool close() {
    if (id_ < 0) return true;
    H5Lock lock;
    const herr_t status = closer_(id_);
    id_ = H5I_INVALID_HID;
    return status >= 0;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// HDF5's description of the most recent failure on this thread ("bad symbol table"; for a
// failed system call the system's reason alone: "File too large"), or "" when its error stack
// is empty. Printable (kernels/printable.h): HDF5 may quote a name it read from the file. Call
// it under H5Lock, right after the failed call.
std::string h5_error_text();

// Takes ownership of the id an H5*create/open call returned; a negative id means the call
// failed, and throws cutrain::Error("<what>: <h5_error_text()>"). Call under H5Lock.
//   H5Handle space = h5_owned(H5Screate_simple(1, dims, nullptr), H5Sclose, "dataspace");
H5Handle h5_owned(hid_t id, H5Handle::Closer closer, const std::string& what);

// Throws cutrain::Error("<what>: <h5_error_text()>") when an herr_t (or htri_t) is negative.
void h5_check(herr_t status, const std::string& what);

}  // namespace cutrain
