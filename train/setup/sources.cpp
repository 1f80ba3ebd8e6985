// The run's data sources and the views of them (see sources.h): a view is a SampleSource that
// forwards to another with fewer samples (FirstN, Subset) or other labels (Relabeled).
#include "train/setup/sources.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "data/pack.h"
#include "kernels/check.h"

namespace cutrain {

namespace {

// Another source seen through a wrapper: every sample as it is, unless a subclass overrides
// (FirstN the size, Relabeled the labels).
class Wrapped : public SampleSource {
 public:
  explicit Wrapped(std::shared_ptr<const SampleSource> all) : all_(std::move(all)) {}
  int64_t size() const override { return all_->size(); }
  int32_t label(int64_t i) const override { return all_->label(i); }
  std::string name(int64_t i) const override { return all_->name(i); }
  const ImageSpec& spec() const override { return all_->spec(); }
  DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override {
    return all_->load(i, key, out, window, t);
  }

 protected:
  std::shared_ptr<const SampleSource> all_;
};

// The first `limit` samples of another source: --limit-train / --limit-val.
class FirstN : public Wrapped {
 public:
  FirstN(std::shared_ptr<const SampleSource> all, int64_t n) : Wrapped(std::move(all)), n_(n) {}
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// The samples `indices` of another source: --val-split's two parts.
class Subset : public SampleSource {
 public:
  Subset(std::shared_ptr<const SampleSource> all, std::vector<int64_t> indices)
      : all_(std::move(all)), indices_(std::move(indices)) {}
  int64_t size() const override { return int64_t(indices_.size()); }
  int32_t label(int64_t i) const override { return all_->label(at(i)); }
  std::string name(int64_t i) const override { return all_->name(at(i)); }
  const ImageSpec& spec() const override { return all_->spec(); }
  DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override {
    return all_->load(at(i), key, out, window, t);
  }

 private:
  int64_t at(int64_t i) const { return indices_[size_t(i)]; }
  std::shared_ptr<const SampleSource> all_;
  std::vector<int64_t> indices_;
};

// Relabelled: --val, eval and predict data whose classes are named in another order.
class Relabeled : public Wrapped {
 public:
  Relabeled(std::shared_ptr<const SampleSource> all, std::vector<int32_t> map)
      : Wrapped(std::move(all)), map_(std::move(map)) {}
  int32_t label(int64_t i) const override {
    const int32_t k = all_->label(i);
    return k >= 0 && size_t(k) < map_.size() ? map_[size_t(k)] : k;
  }

 private:
  std::vector<int32_t> map_;
};

}  // namespace

int label_count(const SampleSource& s) {
  int32_t top = -1;
  for (int64_t i = 0; i < s.size(); i++) top = std::max(top, s.label(i));
  return int(top) + 1;
}

bool is_hdf5_file(const std::string& path) {
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream f(path, std::ios::binary);
  return f.read(head, 8) && std::memcmp(head, kSignature, 8) == 0;
}

std::shared_ptr<const SampleSource> open_source(const std::string& path, const ImageSpec& spec,
                                                int64_t limit, const ListOptions& lists) {
  CHECK(limit >= 0, "open_source: limit must be >= 0, got " << limit);
  std::shared_ptr<const SampleSource> s;
  if (is_hdf5_file(path))
    s = std::make_shared<PackSource>(path, spec);
  else
    s = std::make_shared<ListSource>(read_images(path, lists), spec);
  if (limit > 0 && limit < s->size()) s = std::make_shared<FirstN>(s, limit);
  return s;
}

std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> all,
                                                  std::vector<int64_t> indices) {
  return std::make_shared<Subset>(std::move(all), std::move(indices));
}

std::shared_ptr<const SampleSource> relabel_source(std::shared_ptr<const SampleSource> source,
                                                   std::vector<int32_t> map) {
  if (map.empty()) return source;
  return std::make_shared<Relabeled>(std::move(source), std::move(map));
}

std::vector<std::string> data_class_names(const std::string& path, const ListOptions& lists) {
  if (is_hdf5_file(path)) return read_pack_info(path).class_names;
  return read_images(path, lists).class_names;
}

}  // namespace cutrain
