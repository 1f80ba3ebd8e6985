#include "train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "data/loader.h"
#include "kernels/check.h"

namespace cutrain {

int label_rank(const float* logits, int K, int label) {
  const float mine = logits[label];
  int rank = 0;
  for (int k = 0; k < K; k++)
    rank += logits[k] > mine || (logits[k] == mine && k < label);
  return rank;
}

std::vector<int> top_k(const float* logits, int K, int k) {
  std::vector<int> idx(static_cast<size_t>(K));
  for (int i = 0; i < K; i++) idx[size_t(i)] = i;
  k = std::min(k, K);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  idx.resize(size_t(k));
  return idx;
}

std::vector<double> softmax_row(const float* logits, int K) {
  double m = logits[0];
  for (int k = 1; k < K; k++) m = std::max(m, double(logits[k]));
  std::vector<double> p(static_cast<size_t>(K));
  double s = 0;
  for (int k = 0; k < K; k++) s += p[size_t(k)] = std::exp(double(logits[k]) - m);
  for (double& v : p) v /= s;
  return p;
}

EvalResult evaluate(Model& model, std::shared_ptr<const SampleSource> data,
                    const EvalOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelOptions& mo = model.options();
  const ImageSpec& spec = data->spec();
  CHECK(spec.size == mo.H && spec.size == mo.W && spec.channels == mo.C,
        "evaluate: the data gives " << spec.size << "x" << spec.size << "x" << spec.channels
                                    << " images, the model takes " << mo.H << "x" << mo.W
                                    << "x" << mo.C);
  const int K = mo.classes;
  const SamplerConfig sc = in_order(data->size(), opt.batch);
  LoaderConfig lc;
  lc.threads = opt.threads;
  lc.strict = opt.strict;
  lc.tracer = opt.tracer;
  lc.print_bad = 3;
  Loader loader(data, sc, lc);

  EvalResult r;
  r.class_images.assign(size_t(K), 0);
  r.class_top1.assign(size_t(K), 0);
  double loss_sum = 0;
  const int k5 = std::min(5, K);
  for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
    const Batch batch = loader.next();
    if (batch.n > 0) {
      Tape tape(false);  // inference: nothing recorded, nothing kept alive
      VarPtr x = make_var(input_tensor(batch.images, batch.n, spec.size, spec.channels,
                                       opt.norm, mo.dtype));
      const Tensor labels = Tensor::from_ints(
          std::vector<int32_t>(batch.labels, batch.labels + batch.n), {batch.n});
      VarPtr logits = model.forward(tape, x, false);
      loss_sum += softmax_cross_entropy(tape, logits, labels, 0.0)->value.item() * batch.n;
      const std::vector<float> z = logits->value.to_floats();  // (n,K)
      for (int i = 0; i < batch.n; i++) {
        const int y = batch.labels[i];
        const int rank = label_rank(&z[size_t(i) * size_t(K)], K, y);
        r.top1 += rank < 1;
        r.top5 += rank < k5;
        r.class_images[size_t(y)]++;
        r.class_top1[size_t(y)] += rank < 1;
      }
      r.images += batch.n;
    }
    loader.release(batch);
  }
  r.loss = r.images ? loss_sum / double(r.images) : 0;
  r.bad_files = loader.stats().bad_files;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string eval_summary(const EvalResult& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "loss %.4f  top-1 %.2f%%  top-5 %.2f%%  (%lld images, %.1f s)",
                r.loss, 100 * r.top1_accuracy(), 100 * r.top5_accuracy(), (long long)r.images,
                r.seconds);
  std::string s = buf;
  if (r.bad_files) s += ", " + std::to_string(r.bad_files) + " bad files skipped";
  return s;
}

std::string per_class_report(const EvalResult& r, const std::vector<std::string>& class_names) {
  size_t worst = 0, width = 5;
  for (size_t k = 0; k < r.class_images.size(); k++) {
    auto acc = [&](size_t i) {
      return r.class_images[i] ? double(r.class_top1[i]) / double(r.class_images[i]) : 1.0;
    };
    if (acc(k) < acc(worst)) worst = k;
    if (k < class_names.size()) width = std::max(width, class_names[k].size());
  }
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %5s  %-*s  %8s  %7s\n", "class", int(width), "name", "images",
                "top-1");
  s += buf;
  for (size_t k = 0; k < r.class_images.size(); k++) {
    const double acc =
        r.class_images[k] ? 100.0 * double(r.class_top1[k]) / double(r.class_images[k]) : 0;
    std::snprintf(buf, sizeof buf, "  %5zu  %-*s  %8lld  %6.2f%%%s\n", k, int(width),
                  k < class_names.size() ? class_names[k].c_str() : "", (long long)r.class_images[k],
                  acc, k == worst && r.class_images.size() > 1 ? "  <- worst" : "");
    s += buf;
  }
  return s;
}

}  // namespace cutrain
