// The kernel ladders' host side (kernels/ladder/), in every build: which BatchNorm rung runs
// (v3 where its 16-byte vectors fit, else v2), the rungs' names, and the chapter's predicted
// costs (kernels/ladder/README.md quotes bench/ladder_predict.h's tables as printed). Their
// kernels are tested against the CPU references in conv2d_gpu_test.cpp and
// batchnorm_gpu_test.cpp.
#include <fstream>
#include <sstream>
#include <string>

#include "bench/ladder_predict.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "kernels/ladder/conv_ladder.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("batchnorm ladder: v3 runs where its vectors fit, v2 elsewhere") {
  alignas(16) float aligned[8] = {};
  const void* ok[1] = {aligned};
  const void* odd[1] = {reinterpret_cast<const char*>(aligned) + 2};
  const void* none[2] = {aligned, nullptr};  // an absent tensor (dx not wanted) is no obstacle
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 32, 2, ok, 1) == BnRung::vector);
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 32, 2, none, 2) == BnRung::vector);
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 36, 2, ok, 1) == BnRung::blocked);  // 36 % 8
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 36, 4, ok, 1) == BnRung::vector);   // 36 % 4
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 32, 2, odd, 1) == BnRung::blocked);
  REQUIRE(bn_rung_runs(BnRung::vector, int64_t(1) << 24, 32, 2, ok, 1) == BnRung::blocked);
  REQUIRE(bn_rung_runs(BnRung::vector, 1000, 8 * (kBnVectorBlock + 1), 2, ok, 1) ==
          BnRung::blocked);
  REQUIRE(bn_rung_runs(BnRung::naive, 1000, 36, 2, odd, 1) == BnRung::naive);
}

TEST_CASE("kernel ladders: every rung is named by its number, in order") {
  int v = 0;
  for (ConvRung r : kConvRungs)
    REQUIRE(std::string(conv_rung_name(r)).rfind("v" + std::to_string(++v) + " ", 0) == 0);
  v = 0;
  for (BnRung r : kBnRungs)
    REQUIRE(std::string(bn_rung_name(r)).rfind("v" + std::to_string(++v) + " ", 0) == 0);
  REQUIRE(std::string(conv_rung_name(ConvRung::gemm)) == "v2 gemm");
  REQUIRE(std::string(conv_rung_name(ConvRung::async)) == "v5 async");
  REQUIRE(std::string(bn_rung_name(BnRung::vector)) == "v3 vector");
}

TEST_CASE("kernel ladders: the chapter's predicted costs are the cost functions' (on an H100)") {
  const std::string want = ladder_predictions(roofline_of("h100"));
  std::ifstream in(cutrain_test::repo_root() / "kernels/ladder/README.md");
  std::stringstream page;
  page << in.rdbuf();
  REQUIRE(!page.str().empty());
  // Printed by `bench_kernels_gpu --predict`; on a change, paste its output over the tables.
  INFO("kernels/ladder/README.md should quote, as printed:\n" << want);
  REQUIRE(page.str().find(want) != std::string::npos);
}
