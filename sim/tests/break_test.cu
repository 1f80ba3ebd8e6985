// CUTRAIN_SIM_BREAK (sim/include/cutrain_sim.h, docs/simulator.md): the thread it names, and
// only that one, calls cutrain_sim_break() before its kernel's body, once per matching launch,
// where a debugger's breakpoint stops it. Built only by `make SIM=1`; run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

namespace {

__global__ void break_fill_kernel(int* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = 1; }
__global__ void break_other_kernel(int* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = 2; }

long launches_stopping(void (*launch)(int*), const char* spec) {
  int* y = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&y), 4 * 64 * sizeof(int)) == cudaSuccess);
  cutrain_sim::set_break(spec);
  const long before = cutrain_sim::break_count();
  launch(y);
  launch(y);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const long stops = cutrain_sim::break_count() - before;
  cutrain_sim::set_break("");
  REQUIRE(cudaFree(y) == cudaSuccess);
  return stops;
}

void fill(int* y) { break_fill_kernel<<<4, 64>>>(y); }
void other(int* y) { break_other_kernel<<<4, 64>>>(y); }

}  // namespace

TEST_CASE("sim: CUTRAIN_SIM_BREAK stops the thread it names, in each launch of the kernel it "
          "names") {
  cutrain_sim::reset_errors();
  REQUIRE(launches_stopping(fill, "3,17") == 2);                   // any kernel
  REQUIRE(launches_stopping(fill, "break_fill:3,17") == 2);        // a part of its name
  REQUIRE(launches_stopping(other, "break_fill:3,17") == 0);       // another kernel
  REQUIRE(launches_stopping(fill, "4,0") == 0);                    // no block 4 in a grid of 4
  REQUIRE(launches_stopping(fill, "0,64") == 0);                   // no thread 64 in a block of 64
  REQUIRE(launches_stopping(fill, "") == 0);                       // off
  REQUIRE(launches_stopping(fill, "3;17") == 0);                   // not BLOCK,THREAD: said, off
}
