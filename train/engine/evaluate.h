// defines: EvalResult and evaluate(): loss, top-1 and top-5 accuracy, per-class accuracy and
// the confusion matrix of a model over every sample of a data set, on the CPU or a GPU;
// EvalAccumulator, the host-side tally both share; top_k and label_rank, the ranking rules;
// the reports printed after each epoch and at the end.
//
// Evaluation runs the model in inference mode (BatchNorm uses its running statistics), records
// nothing on the tape, and visits the samples in order, each once (the last batch may be
// smaller). The loss is the plain cross-entropy (no label smoothing), averaged over images.
// With test-time flips (EvalOptions::tta_flip, --tta flip) each image's logits are the average
// of its own and its mirror image's (left to right), and the loss and the ranks are of those.
// Ties between logits rank the lower class first, as top1_correct does.
//
// On a GPU (the model's options().device is cuda) the loader copies each batch to the device,
// the batch is normalised, run and scored there, and only the logits (n,K) and the batch's loss
// come back, into pinned memory, while the next batch computes. The ranking is then the CPU's
// very code (EvalAccumulator), so the two paths differ only in the logits they rank.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/source.h"
#include "data/trace.h"
#include "nn/model.h"
#include "train/engine/batch_input.h"

namespace cutrain {

struct EvalResult {
  int64_t images = 0;             // evaluated (bad files skipped)
  double loss = 0;                // mean cross-entropy
  int64_t top1 = 0, top5 = 0;     // correct within the first 1 / 5 (of min(5, classes))
  std::vector<int64_t> class_images, class_top1;  // per class (the label)
  // (K,K) row-major: confusion[y * K + p] images of class y whose top-1 class is p, so row y
  // sums to class_images[y] and (for finite logits) the diagonal is class_top1.
  std::vector<int64_t> confusion;
  int64_t bad_files = 0;
  double seconds = 0;

  double top1_accuracy() const { return images ? double(top1) / double(images) : 0; }
  double top5_accuracy() const { return images ? double(top5) / double(images) : 0; }
};

struct EvalOptions {
  int batch = 256;
  int threads = 0;      // decode threads (0: the loader's default, hardware threads - 1)
  bool strict = false;  // a bad file stops evaluation instead of being skipped
  Normalization norm;
  Tracer* tracer = nullptr;  // the loader's spans (data/trace.h); null: none
  bool tta_flip = false;     // the logits of each image and its mirror averaged (--tta flip)
};

// The host side of evaluation, one code path for the CPU and the GPU: each batch's logits and
// mean loss go in, the metrics come out.
class EvalAccumulator {
 public:
  explicit EvalAccumulator(int classes);
  // logits (n,K) f32 on the host, labels (n) in [0, K), loss: the batch's mean cross-entropy.
  void add(const float* logits, const int32_t* labels, int n, double loss);
  // images, loss (the mean over images), top1, top5, the per-class counts and the confusion
  // matrix, so far.
  EvalResult result() const;

 private:
  EvalResult r_;
  double loss_sum_ = 0;  // the sum over images, not batches: a short last batch weighs less
};

// One batch through the model in inference mode, in context ctx (on a GPU queued on its
// stream): logits (n,K) in the model's dtype and labels (n) i32. With tta_flip the logits are
// the average of the images' and their mirror images' (average, nn/ops.h). evaluate and
// predict both call it.
struct Inference {
  Tensor logits, labels;
};
Inference infer(Model& model, const Context& ctx, const Batch& batch, const InputNorm& norm,
                bool tta_flip);

// Every sample of `data` through the model, in the context it was made in
// (options().context: its device, and on a GPU its stream and conv/linear implementations, or
// a stream of evaluation's own when that is the legacy default stream). data->spec() must
// match the model's input.
EvalResult evaluate(Model& model, std::shared_ptr<const SampleSource> data,
                    const EvalOptions& opt);

// How many classes rank before `label` in a row of K logits: those with a larger logit, and
// those with an equal logit and a lower index. The label is in the top k when this is < k.
int label_rank(const float* logits, int K, int label);

// The k best classes of a row, best first (ties: lower class first).
std::vector<int> top_k(const float* logits, int K, int k);

// softmax of one row, in double.
std::vector<double> softmax_row(const float* logits, int K);

// "loss 0.3012  top-1 89.21%  top-5 99.70%  (10000 images, 2.1 s)"
std::string eval_summary(const EvalResult& r);

// One line per class: index, name, images, top-1 accuracy; the worst class marked. The
// names are padded to the widest in terminal columns (data/text_width.h), at most
// kMaxNameColumns (longer ones cut with "…"), so every row's numbers line up.
std::string per_class_report(const EvalResult& r, const std::vector<std::string>& class_names);

}  // namespace cutrain
