// sim/rewrite.py, the GPU simulator's rewriter, tested on its own (sim/tests/rewrite_test.py,
// any python3 and g++): every CUDA construct it handles becomes host code that compiles against
// the simulator's headers, or is refused naming the file and line. Run by make test, which
// builds no simulator: the constructs run under make sim-test (sim/tests/
// rewrite_constructs_test.cu).
#include <doctest/doctest.h>

#include <string>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"

using namespace cutrain_test;

TEST_CASE("sim rewrite: each CUDA construct compiles against the simulator, or is refused naming "
          "its file and line") {
  TempDir dir;
  const Ran r = run_process({"/usr/bin/env", "python3",
                             (repo_root() / "sim/tests/rewrite_test.py").string()},
                            dir / "unittest.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("\nOK") != std::string::npos);
}
