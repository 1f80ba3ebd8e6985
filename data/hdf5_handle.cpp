// The process-wide HDF5 lock, HDF5's error text, and the checked ownership of new ids.
#include "data/hdf5_handle.h"

#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

std::recursive_mutex& hdf5_mutex() {
  // HDF5's exit handler closes the files still open. One whose write failed (a full disk) is
  // still open after its failed H5Fclose, and closing it again there crashes libhdf5 1.10
  // (H5F__close_cb): a clean exit 2 would end in a segfault. cutrain closes every file
  // itself, so the handler is turned off, before HDF5's first call (this lock comes first).
  static const bool no_exit_handler = (H5dont_atexit(), true);
  (void)no_exit_handler;
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

// HDF5's file driver reports a failed system call as "file write failed: time = ..., filename
// = '...', file descriptor = 3, errno = 27, error message = 'File too large', buf = ...": the
// system's reason is the part a user can act on.
std::string system_reason(const std::string& desc) {
  const std::string key = "error message = '";
  const size_t at = desc.find(key);
  if (desc.find("errno = ") == std::string::npos || at == std::string::npos) return desc;
  const size_t end = desc.find('\'', at + key.size());
  return end == std::string::npos ? desc : desc.substr(at + key.size(), end - at - key.size());
}
}  // namespace

std::string h5_error_text() {
  H5Lock lock;
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &text);
  return printable(system_reason(text));  // it may quote a file's name, or names in the file
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
