#include "train/setup/balance.h"

#include <algorithm>
#include <cstdio>

#include "kernels/check.h"

namespace cutrain {

ClassBalance class_balance(const std::string& mode, const SampleSource& train, int classes) {
  CHECK(mode == "none" || mode == "sampler" || mode == "loss", "class_balance: mode " << mode);
  ClassBalance b;
  b.mode = mode;
  if (mode == "none") return b;
  b.counts.assign(size_t(classes), 0);
  for (int64_t i = 0; i < train.size(); i++) {
    const int32_t k = train.label(i);
    CHECK(k >= 0 && k < classes, "class_balance: sample " << i << " (" << train.name(i)
                                 << ") has label " << k << ", outside [0, " << classes << ")");
    b.counts[size_t(k)]++;
    if (mode == "sampler") b.labels.push_back(k);
  }
  if (mode == "loss") b.weights = inverse_frequency_weights(b.counts);
  return b;
}

std::vector<double> inverse_frequency_weights(const std::vector<int64_t>& counts) {
  int64_t N = 0, K = 0;
  for (int64_t n : counts) N += n, K += n > 0;
  std::vector<double> w(counts.size(), 0.0);
  for (size_t k = 0; k < counts.size(); k++)
    if (counts[k] > 0) w[k] = double(N) / (double(K) * double(counts[k]));
  return w;
}

namespace {

std::string class_name(const std::vector<std::string>& names, size_t k) {
  return k < names.size() ? names[k] : "class " + std::to_string(k);
}

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::string balance_description(const ClassBalance& b, const std::vector<std::string>& names) {
  if (b.mode == "none") return "";
  int64_t N = 0, K = 0;
  std::vector<std::string> empty;
  for (size_t k = 0; k < b.counts.size(); k++) {
    N += b.counts[k];
    K += b.counts[k] > 0;
    if (b.counts[k] == 0) empty.push_back(class_name(names, k));
  }
  std::string s = "--balance " + b.mode + ": ";
  if (b.mode == "sampler") {
    const int64_t q = N / K, r = N % K;
    s += "each epoch draws " + std::to_string(N) + " samples, " + std::to_string(q) +
         " per class of " + std::to_string(K);
    if (r > 0) s += " (" + std::to_string(r) + " of them one more, in turn)";
    s += " (classes under " + std::to_string(q) +
         " repeat samples, larger ones are subsampled)";
  } else {
    s += "class weights N / (" + std::to_string(K) + " n_k), mean 1 over the training samples, "
         "in the training loss only (evaluation is unweighted): ";
    if (b.weights.size() <= 12) {
      for (size_t k = 0; k < b.weights.size(); k++)
        s += (k ? ", " : "") + class_name(names, k) + " " + number("%.3g", b.weights[k]);
    } else {
      size_t lo = 0, hi = 0;
      for (size_t k = 0; k < b.weights.size(); k++) {
        if (b.counts[k] == 0) continue;
        if (b.counts[lo] == 0 || b.weights[k] < b.weights[lo]) lo = k;
        if (b.weights[k] > b.weights[hi]) hi = k;
      }
      s += "from " + number("%.3g", b.weights[lo]) + " (" + class_name(names, lo) + ") to " +
           number("%.3g", b.weights[hi]) + " (" + class_name(names, hi) + ")";
    }
  }
  if (!empty.empty()) {
    s += b.mode == "sampler" ? "; never drawn, having no training samples: "
                             : "; weight 0, having no training samples: ";
    for (size_t i = 0; i < empty.size() && i < 5; i++) s += (i ? ", " : "") + empty[i];
    if (empty.size() > 5) s += " and " + std::to_string(empty.size() - 5) + " more";
  }
  return s;
}

}  // namespace cutrain
