#include "train/cli/predict.h"

#include <filesystem>

#include "data/loader.h"
#include "kernels/check.h"
#include "kernels/printable.h"
#include "train/checkpoint/checkpoint.h"

namespace cutrain {

std::vector<Prediction> predict(Model& model, std::shared_ptr<const SampleSource> data,
                                const EvalOptions& opt, int k, bool all_probs) {
  USER_CHECK(k >= 1, "predict: --top must be >= 1, got " << k);
  const ModelOptions& mo = model.options();
  const ImageSpec& spec = data->spec();
  CHECK(spec.size == mo.H && spec.size == mo.W && spec.channels == mo.C,
        "predict: the data gives " << spec.size << "x" << spec.size << "x" << spec.channels
                                   << " images, the model takes " << mo.H << "x" << mo.W
                                   << "x" << mo.C);
  const SamplerConfig sc = in_order(data->size(), opt.batch);
  LoaderConfig lc;
  lc.threads = opt.threads;
  lc.strict = opt.strict;
  lc.tracer = opt.tracer;
  Loader loader(data, sc, lc);
  const InputNorm norm(opt.norm);  // the batches stay on the host (below)
  std::vector<Prediction> out;
  for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
    const Batch batch = loader.next();
    if (batch.n > 0) {
      // Where the model was made. Converted on the host, then on the model's device: a
      // synchronous copy for a model on cuda, which is fine for the few images predict is for
      // (evaluate() is the pipelined path).
      const std::vector<float> z =
          infer(model, mo.context, batch, norm, opt.tta_flip).logits.to_floats();  // (n,K)
      for (int i = 0; i < batch.n; i++) {
        const float* row = &z[size_t(i) * size_t(mo.classes)];
        Prediction p;
        p.index = batch.indices[i];
        p.classes = top_k(row, mo.classes, k);
        std::vector<double> prob = softmax_row(row, mo.classes);
        for (int c : p.classes) p.probs.push_back(prob[size_t(c)]);
        if (all_probs) p.all = std::move(prob);
        out.push_back(std::move(p));
      }
    }
    loader.release(batch);
  }
  return out;
}

std::string resolve_checkpoint_arg(const std::string& file_or_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  USER_CHECK(fs::exists(file_or_dir, ec),
             "--checkpoint " << printable(file_or_dir) << ": no such file or folder");
  if (!fs::is_directory(file_or_dir, ec)) return file_or_dir;
  const std::string best = best_checkpoint_path(file_or_dir);
  if (fs::exists(best, ec)) return best;
  const std::string newest = newest_checkpoint(file_or_dir);
  USER_CHECK(!newest.empty(),
             "--checkpoint " << printable(file_or_dir) << ": no complete checkpoint there");
  return newest;
}

}  // namespace cutrain
