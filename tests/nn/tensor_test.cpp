// Tensor: shapes, dtypes, conversions, views, and argument errors.
#include <cmath>

#include "nn/tensor.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::test_gpu;

TEST_CASE("tensor: shape, numel, bytes and description") {
  Tensor t = Tensor::zeros({2, 28, 28, 3}, DType::f16);
  REQUIRE(t.numel() == 2 * 28 * 28 * 3);
  REQUIRE(t.bytes() == size_t(t.numel()) * 2);
  REQUIRE(t.dim(-1) == 3);
  REQUIRE(t.dim(0) == 2);
  REQUIRE(t.str() == "f16 cpu (2,28,28,3)");
  REQUIRE(reinterpret_cast<uintptr_t>(t.raw()) % 64 == 0);
  for (double v : t.to_doubles()) REQUIRE(v == 0.0);
  REQUIRE_ERROR(t.dim(4), "dimension 4 out of range for shape (2,28,28,3)");
}

TEST_CASE("tensor: conversions round to half and back") {
  Tensor t = Tensor::from_floats({1.0f, 1.0f + 1.0f / 4096, 70000.0f, -0.5f}, {4});
  Tensor h = t.to(DType::f16);
  REQUIRE(h.dtype() == DType::f16);
  REQUIRE(h.data<half_t>()[0].bits == 0x3c00);
  REQUIRE(h.data<half_t>()[1].bits == 0x3c00);  // 1 + 2^-12 rounds to 1
  REQUIRE(std::isinf(float(h.data<half_t>()[2])));
  const std::vector<double> back = h.to(DType::f64).to_doubles();
  REQUIRE(back[0] == 1.0);
  REQUIRE(back[3] == -0.5);
  REQUIRE(t.to(DType::f32).raw() == t.raw());  // no-op conversion shares storage
}

TEST_CASE("tensor: reshape is a view, clone is a copy") {
  Tensor t = Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v = t.reshape({3, 2});
  Tensor c = t.clone();
  t.data<float>()[0] = 42;
  REQUIRE(v.data<float>()[0] == 42);
  REQUIRE(c.data<float>()[0] == 1);
  REQUIRE_ERROR(t.reshape({4, 2}), "cannot reshape (2,3) to (4,2)");
}

TEST_CASE("tensor: bad arguments name the problem") {
  REQUIRE_ERROR(Tensor::from_floats({1, 2, 3}, {2, 2}), "3 values do not fill shape (2,2)");
  REQUIRE_ERROR(Tensor::empty({2, -1}, DType::f32), "negative dimension in shape (2,-1)");
  Tensor t = Tensor::zeros({2}, DType::f32);
  REQUIRE_ERROR(t.data<half_t>(), "tensor is f32, asked for f16");
  REQUIRE_ERROR(t.item(), "item() of a tensor with 2 elements");
  REQUIRE_ERROR(Tensor().raw(), "undefined tensor");
  Tensor labels = Tensor::from_ints({1, 2}, {2});
  REQUIRE_ERROR(labels.to(DType::f32), "labels (i32) are not converted");
  if (!gpu_usable()) REQUIRE_ERROR(t.to(test_gpu()), "cannot place a tensor on cuda");
}
