// defines: CHECK (a broken invariant -> cutrain::Error with file:line), USER_CHECK (a mistake
// outside cutrain -> cutrain::UserError, the message alone), CUDA_CHECK (abort with the call,
// file:line and the CUDA error), LAUNCH_CHECK (after every kernel launch),
// set_cuda_errors_throw (the test runner's switch: CUDA errors throw instead of aborting).
//
// Three kinds of failure, three policies:
//  - USER_CHECK is for what the user can get wrong and fix: a flag, a file, the data, a full
//    disk. It throws UserError, whose message is all the user needs: what is wrong, with which
//    value or path, and what to do. No source location: it is not a bug in cutrain. The
//    program prints it and exits 2 (train/cli/main.cpp).
//  - CHECK is for what a caller can get wrong (a bad shape, a label out of range): a broken
//    invariant, a bug somewhere. It throws Error with file:line, so the program can report it
//    (exit 1) and tests can assert it.
//  - CUDA_CHECK is for the runtime failing. CUDA errors are sticky: after one, the context is
//    unusable, so there is nothing sensible to recover; print everything and abort. (Except
//    while capturing a graph, where an error means "this cannot be recorded": it throws.)
//    The test runner turns on set_cuda_errors_throw: then every CUDA, cuDNN and cuBLAS error
//    throws, so a faulty kernel fails its own test case with the call and file:line instead of
//    ending the process and hiding every other result. A sticky error (an illegal address,
//    say) still breaks the context: the process's later GPU calls fail too, which is why
//    bench/bundle/run.sh runs each group of GPU tests in a process of its own.
#ifndef CUTRAIN_KERNELS_CHECK_H
#define CUTRAIN_KERNELS_CHECK_H
#include <sstream>
#include <stdexcept>
#include <string>

namespace cutrain {

// Thrown by CHECK. what() reads "file:line: message".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by USER_CHECK: the cause is outside cutrain (a flag, a file, the data, the disk).
// what() is the message alone. A UserError is an Error, so code that catches Error (to add
// where it happened, say) catches both; rethrow with rethrow_with_context to keep the kind.
struct UserError : Error {
  using Error::Error;
};

// Throws a copy of `e` (the same kind: UserError or Error) with "prefix: " before its message.
[[noreturn]] inline void rethrow_with_context(const Error& e, const std::string& prefix) {
  if (dynamic_cast<const UserError*>(&e)) throw UserError(prefix + ": " + e.what());
  throw Error(prefix + ": " + e.what());
}

[[noreturn]] inline void throw_error(const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << file << ":" << line << ": " << msg;
  throw Error(os.str());
}

}  // namespace cutrain

#if defined(CUTRAIN_CUDA)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

namespace cutrain {
// Whether this thread is capturing a CudaGraph (kernels/gpu.h). Then a failing call is not a
// broken context but CUDA (or cuDNN, cuBLAS) refusing to record it, and nothing has run: the
// *_fail functions throw cutrain::Error instead of aborting, and CudaGraph::capture turns the
// error into its answer.
bool capturing_graph();
// Whether a failing CUDA, cuDNN or cuBLAS call throws cutrain::Error rather than aborting: while
// capturing a graph, or everywhere once set_cuda_errors_throw(true) was called (the tests).
bool cuda_errors_throw();
void set_cuda_errors_throw(bool on);

[[noreturn]] inline void cuda_fail(const char* call, const char* file, int line, cudaError_t e) {
  if (cuda_errors_throw()) {
    cudaGetLastError();  // clears it unless it is sticky
    throw_error(file, line, std::string(call) + ": " + cudaGetErrorName(e) + ": " +
                                cudaGetErrorString(e));
  }
  std::fprintf(stderr, "CUDA error at %s:%d\n  %s\n  %s: %s\n", file, line, call,
               cudaGetErrorName(e), cudaGetErrorString(e));
  std::abort();
}
// Set CUTRAIN_SYNC_LAUNCHES=1 to synchronise after every launch, so an asynchronous error is
// reported at the launch that caused it rather than at some later call.
bool sync_after_launch();
}  // namespace cutrain

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t cutrain_e_ = (call);                                       \
    if (cutrain_e_ != cudaSuccess) ::cutrain::cuda_fail(#call, __FILE__, __LINE__, cutrain_e_); \
  } while (0)

// After every <<<...>>>: catches bad launch configurations at once, and with
// CUTRAIN_SYNC_LAUNCHES=1 also errors raised while the kernel ran (not while capturing a
// graph: the kernel is recorded, not run).
#define LAUNCH_CHECK()                                                     \
  do {                                                                     \
    CUDA_CHECK(cudaGetLastError());                                        \
    if (::cutrain::sync_after_launch() && !::cutrain::capturing_graph())   \
      CUDA_CHECK(cudaDeviceSynchronize());                                 \
  } while (0)
#endif
#endif  // CUTRAIN_KERNELS_CHECK_H

// Defined on every include, outside the guard: doctest has a CHECK macro of its own, and the
// tests include this header after doctest so that CHECK is cutrain's everywhere (tests assert
// with REQUIRE).
#undef CHECK
// CHECK(cond, a << b << c): throws cutrain::Error("file:line: a b c") when cond is false.
#define CHECK(cond, msg)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      std::ostringstream cutrain_check_os_;                       \
      cutrain_check_os_ << msg;                                   \
      ::cutrain::throw_error(__FILE__, __LINE__, cutrain_check_os_.str()); \
    }                                                             \
  } while (0)

// USER_CHECK(cond, a << b): throws cutrain::UserError("a b") when cond is false.
#undef USER_CHECK
#define USER_CHECK(cond, msg)                                     \
  do {                                                            \
    if (!(cond)) {                                                \
      std::ostringstream cutrain_check_os_;                       \
      cutrain_check_os_ << msg;                                   \
      throw ::cutrain::UserError(cutrain_check_os_.str());        \
    }                                                             \
  } while (0)
