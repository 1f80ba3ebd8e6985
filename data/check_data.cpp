#include "data/check_data.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace cutrain {

CheckReport check_data(const ImageList& list, const ImageSpec& spec, int threads,
                       const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckReport rep;
  rep.images = int64_t(list.samples.size());
  int classes = int(list.class_names.size());
  for (const Sample& s : list.samples) classes = std::max(classes, s.label + 1);
  rep.histogram.assign(size_t(classes), 0);

  auto src = std::make_shared<ListSource>(list, spec);
  // in list order: the report reads like the list
  const SamplerConfig sc = in_order(rep.images, std::min<int64_t>(256, rep.images));
  LoaderConfig lc;
  lc.threads = threads;
  lc.print_bad = 0;    // the report names them all
  Loader loader(src, sc, lc);
  int64_t done = 0;
  for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
    Batch batch = loader.next();
    for (int k = 0; k < batch.n; k++) rep.histogram[size_t(batch.labels[k])]++;
    rep.good += batch.n;
    done += int64_t(loader.sampler().global_batch_size(b));
    loader.release(batch);
    if (progress) progress(done, rep.images);
  }
  rep.bad = loader.bad_files();
  std::sort(rep.bad.begin(), rep.bad.end(),
            [](const BadFile& a, const BadFile& b) { return a.index < b.index; });
  for (const BadFile& f : rep.bad) rep.bad_by_kind[f.kind]++;
  rep.stats = loader.stats();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

double class_imbalance(const std::vector<int64_t>& h) {
  if (h.empty()) return 1.0;
  const int64_t lo = *std::min_element(h.begin(), h.end());
  const int64_t hi = *std::max_element(h.begin(), h.end());
  if (lo == 0) return std::numeric_limits<double>::infinity();
  return double(hi) / double(lo);
}

}  // namespace cutrain
