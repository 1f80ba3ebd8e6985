// The process-wide HDF5 lock, HDF5's error text, and the checked ownership of new ids.
#include "data/hdf5_handle.h"

#include "kernels/check.h"

namespace cutrain {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mu;
  // HDF5 prints every failure's error stack to stderr by default; cutrain reports failures as
  // its own errors (h5_error_text() adds HDF5's reason), so turn the printing off. A library
  // built with H5_HAVE_THREADSAFE (the libhdf5-dev 1.10.8 of this project's Debian image is)
  // keeps that setting per thread, so once in each thread.
  thread_local bool quiet = false;
  if (!quiet) {
    quiet = true;
    std::lock_guard<std::recursive_mutex> lock(mu);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  return mu;
}

namespace {
// Called for each entry of the error stack, innermost first (H5E_WALK_UPWARD): keeps the
// first, which says what actually went wrong ("No such file or directory", "bad symbol table").
herr_t keep_innermost(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}
}  // namespace

std::string h5_error_text() {
  H5Lock lock;
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &text);
  return text;
}

namespace {
// "what: HDF5's reason", or just "what" when HDF5 gave none.
std::string with_reason(const std::string& what) {
  const std::string reason = h5_error_text();
  return reason.empty() ? what : what + ": " + reason;
}
}  // namespace

H5Handle h5_owned(hid_t id, H5Handle::Closer closer, const std::string& what) {
  USER_CHECK(id >= 0, with_reason(what));
  return H5Handle(id, closer);
}

void h5_check(herr_t status, const std::string& what) {
  USER_CHECK(status >= 0, with_reason(what));
}

}  // namespace cutrain
