// defines: what the fuzz targets share: Outcome and the feed_<target> functions (one input,
// as bytes, handed to one parser of outside input the way cutrain meets it), refuse_errors
// (cutrain::Error is a clean "no"), fuzz_require (a broken promise of the parser, which must
// not pass as a clean "no"), scratch_file (the bytes as a file, for parsers that take a path)
// and CUTRAIN_FUZZ_TARGET (libFuzzer's entry point, in the fuzz build only).
//
// Each fuzz/<target>_fuzz.cpp defines its feed and, under `make fuzz`, LLVMFuzzerTestOneInput
// calling it. The test build compiles the same files without the entry point, so
// tests/fuzz/regressions_test.cpp runs every kept reproducer through the very same feed.
//
// A feed returns when the parser accepted the input or refused it with cutrain::Error (the
// project's exception for bad input) whose message is printable (is_printable_message,
// kernels/printable.h: no control byte, invalid UTF-8 or bidi control from the input reaches
// the terminal raw, and a line break only where cutrain lists problems). Everything else is a
// finding: any other exception
// escapes (libFuzzer reports it as a crash; the regression test fails), and so do a crash, an
// AddressSanitizer or UndefinedBehaviorSanitizer report, a hang or a runaway allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain_fuzz {

enum class Outcome { accepted, refused };

// The targets (fuzz/README.md says what each reaches).
Outcome feed_image_list(const uint8_t* data, size_t size);
Outcome feed_csv_list(const uint8_t* data, size_t size);
Outcome feed_image_decode(const uint8_t* data, size_t size);
Outcome feed_pack(const uint8_t* data, size_t size);
Outcome feed_checkpoint(const uint8_t* data, size_t size);
Outcome feed_checkpoint_config(const uint8_t* data, size_t size);
Outcome feed_model_spec(const uint8_t* data, size_t size);
Outcome feed_idx(const uint8_t* data, size_t size);

// A promise the parser's header makes about what it accepted (every path absolute, an image
// as large as it says, ...). Broken, it throws std::logic_error: not a cutrain::Error, so it
// escapes the feed and counts as a finding.
inline void fuzz_require(bool ok, const std::string& what) {
  if (!ok) throw std::logic_error("fuzz: broken promise: " + what);
}

// Runs f(): accepted when it returns, refused when it throws cutrain::Error, whose message
// must be printable (the refusal reaches the user's terminal): a message that is not is a
// finding, shown with its escapes.
template <typename F>
Outcome refuse_errors(F&& f) {
  try {
    f();
    return Outcome::accepted;
  } catch (const cutrain::Error& e) {
    fuzz_require(cutrain::is_printable_message(e.what()),
                 "a refusal's message is not printable: " + cutrain::printable(e.what()));
    return Outcome::refused;
  }
}

// Writes the bytes to `name` in this process's scratch folder (cutrain-fuzz-<pid>-*, made on
// first use under /dev/shm when it is writable and TMPDIR is not set, else under TMPDIR or
// /tmp; removed at exit, or by the next process when this one crashed) and returns the file's
// path. The same name is rewritten by the next input.
std::string scratch_file(const std::string& name, const uint8_t* data, size_t size);
// Removes `name` from the scratch folder, if it is there.
void scratch_remove(const std::string& name);

}  // namespace cutrain_fuzz

// libFuzzer's entry point, defined only when building the fuzzers (CUTRAIN_FUZZ_ENTRY): each
// input goes to the feed, whose only failures are findings.
#ifdef CUTRAIN_FUZZ_ENTRY
#define CUTRAIN_FUZZ_TARGET(feed)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {         \
    (void)feed(data, size);                                                         \
    return 0;                                                                       \
  }
#else
#define CUTRAIN_FUZZ_TARGET(feed)
#endif
