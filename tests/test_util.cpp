#include "tests/test_util.h"

#include <cmath>
#include <cstdlib>
#include <regex>

#include "data/fashion_mnist.h"
#include "kernels/check.h"
#include "kernels/rng.h"

using namespace cutrain;

namespace cutrain_test {

void skip_gpu() {
  if (env_flag("CUTRAIN_EXPECT_GPU"))
    FAIL("CUTRAIN_EXPECT_GPU is set, but the GPU is not usable: " << gpu_unavailable_reason());
  skip(gpu_unavailable_reason());
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) n++;
  return n;
}

bool names_source_location(const std::string& message) {
  static const std::regex location(R"([A-Za-z0-9_]\.(cpp|cu|h):[0-9]+)");
  return std::regex_search(message, location);
}

std::filesystem::path bin_dir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}
// bin/ sits in the repository; the simulator's build/sim/bin/ (sim/README.md) two floors deeper.
std::filesystem::path repo_root() {
  std::filesystem::path p = bin_dir().parent_path();
  if (p.filename() == "sim" && p.parent_path().filename() == "build")
    p = p.parent_path().parent_path();
  return p;
}

Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  std::vector<double> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); i++) v[i] = lo + (hi - lo) * double(rng_uniform(seed, i));
  return Tensor::from_doubles(v, shape, dtype);
}

namespace {
double weighted_sum(const Tensor& out, const std::vector<double>& r) {
  const std::vector<double> o = out.to_doubles();
  double s = 0;
  for (size_t i = 0; i < o.size(); i++) s += o[i] * r[i];
  return s;
}
}  // namespace

GradCheckStats gradcheck(const std::function<VarPtr(Tape&, const std::vector<VarPtr>&)>& f,
                         const std::vector<VarPtr>& leaves, GradCheckOptions opt) {
  GradCheckStats stats;
  for (auto& l : leaves) {
    REQUIRE(l->value.dtype() == DType::f64);
    l->grad = Tensor();
  }
  // analytic: one backward seeded with R
  Tape tape;
  VarPtr out = f(tape, leaves);
  const Tensor R = uniform(out->value.shape(), DType::f64, 12345, -1, 1);
  const std::vector<double> r = R.to_doubles();
  tape.backward(out, R);

  auto L = [&] {
    Tape off(Context::cpu(), false);
    return weighted_sum(f(off, leaves)->value, r);
  };
  for (size_t li = 0; li < leaves.size(); li++) {
    const VarPtr& leaf = leaves[li];
    if (!leaf->requires_grad) continue;
    REQUIRE_MESSAGE(leaf->grad.defined(), "leaf " << li << " (" << leaf->name << ") got no gradient");
    const std::vector<double> analytic = leaf->grad.to_doubles();
    double* x = leaf->value.data<double>();
    size_t checked = 0, kinks = 0;
    const double l0 = L();  // every perturbation below is undone before the next
    for (int64_t i = 0; i < leaf->value.numel(); i++) {
      const double x0 = x[i];
      x[i] = x0 + opt.h;
      const double lp = L();
      x[i] = x0 - opt.h;
      const double lm = L();
      x[i] = x0;
      // On a kink the left and right slopes differ: their difference, times h, is the second
      // difference. A smooth function makes it ~f''h^2, far smaller.
      if (std::fabs(lp - 2 * l0 + lm) > 1e-4 * opt.h) {
        kinks++;
        continue;
      }
      const double numeric = (lp - lm) / (2 * opt.h);
      checked++;
      INFO("leaf " << li << " (" << leaf->name << ") " << leaf->value.str() << " element " << i
                   << ": analytic " << analytic[size_t(i)] << ", numeric " << numeric);
      REQUIRE(std::fabs(analytic[size_t(i)] - numeric) <=
              opt.atol + opt.rtol * std::fabs(numeric));
    }
    INFO("leaf " << li << ": " << kinks << " of " << leaf->value.numel() << " on kinks");
    REQUIRE(kinks * 10 <= size_t(leaf->value.numel()));
    REQUIRE(checked > 0);
    stats.checked += checked;
    stats.kinks += kinks;
  }
  return stats;
}

void require_near(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      // where either side overflowed or is NaN, both must be the same: inf of the same sign, or
      // both NaN (a tolerance means nothing there, and inf - inf would be NaN)
      REQUIRE((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))));
      continue;
    }
    REQUIRE(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  }
}

void require_equal(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(got[i] == want[i]);
  }
}

void require_close(const Tensor& got, const std::vector<double>& want, double atol,
                   double rtol) {
  require_near(got.to_doubles(), want, atol, rtol);
}

}  // namespace cutrain_test
