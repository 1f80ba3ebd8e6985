#include "train/engine/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "data/loader.h"
#include "data/text_width.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/context.h"

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

EvalAccumulator::EvalAccumulator(int classes) {
  CHECK(classes >= 1, "evaluate: " << classes << " classes");
  r_.class_images.assign(size_t(classes), 0);
  r_.class_top1.assign(size_t(classes), 0);
  r_.confusion.assign(size_t(classes) * size_t(classes), 0);
}

void EvalAccumulator::add(const float* logits, const int32_t* labels, int n, double loss) {
  const int K = int(r_.class_images.size());
  const int k5 = std::min(5, K);
  for (int i = 0; i < n; i++) {
    const int y = labels[i];
    USER_CHECK(y >= 0 && y < K, "evaluate: label " << y << " is outside the " << K << " classes");
    const float* row = &logits[size_t(i) * size_t(K)];
    const int rank = label_rank(row, K, y);
    r_.top1 += rank < 1;
    r_.top5 += rank < k5;
    r_.class_images[size_t(y)]++;
    r_.class_top1[size_t(y)] += rank < 1;
    const int predicted = top_k(row, K, 1)[0];  // the ranking rule predict shows
    r_.confusion[size_t(y) * size_t(K) + size_t(predicted)]++;
  }
  r_.images += n;
  loss_sum_ += loss * n;
}

EvalResult EvalAccumulator::result() const {
  EvalResult r = r_;
  r.loss = r.images ? loss_sum_ / double(r.images) : 0;
  return r;
}

Inference infer(Model& model, const Context& ctx, const Batch& batch, const InputNorm& norm,
                bool tta_flip) {
  Tape tape(ctx, /*enabled=*/false);  // inference: nothing recorded, nothing kept alive
  const DType dtype = model.options().dtype;
  ModelInput in = model_input(batch, 0, batch.n, norm, dtype, ctx);  // (n,S,S,C), (n) i32
  Tensor logits = model.forward(tape, make_var(in.x), false)->value;
  if (tta_flip) {  // the mirror images through the model too, the two logits averaged
    const ModelInput m = model_input(batch, 0, batch.n, norm, dtype, ctx, /*mirror=*/true);
    logits = average(ctx, logits, model.forward(tape, make_var(m.x), false)->value);
  }
  return {std::move(logits), std::move(in.labels)};
}

namespace {

// One batch's results on their way back to the host. On a GPU the copies into pinned memory
// are queued behind the batch's forward and `ready` is recorded after them: the host reads the
// buffers only once `ready` has passed. On the CPU they are written at once.
struct ResultSlot {
  std::vector<float> logits;    // CPU: (n,K) f32
  double loss = 0;              // CPU: the batch's mean cross-entropy
  PinnedBuffer d_logits;        // GPU: copies of the (batch,K) f32 logits
  PinnedBuffer d_loss;          // GPU: and of the (1) f32 loss
  std::unique_ptr<Event> ready;
  std::vector<int32_t> labels;  // (n): a host copy, as the loader's slot goes back before
  int n = 0;                    // images in flight; 0: nothing to read

  ResultSlot(const Context& ctx, int batch, int K) {
    if (ctx.device != Device::cuda) return;
    d_logits = PinnedBuffer(size_t(batch) * size_t(K) * sizeof(float));
    d_loss = PinnedBuffer(sizeof(float));
    ready = std::make_unique<Event>();
  }
};

// Waits for a slot's results, if it holds any, adds them to the tally and frees the slot.
void drain(ResultSlot& s, EvalAccumulator& acc) {
  if (s.n == 0) return;
  if (s.ready) {
    s.ready->synchronize();
    acc.add(static_cast<const float*>(s.d_logits.data()), s.labels.data(), s.n,
            double(*static_cast<const float*>(s.d_loss.data())));
  } else {
    acc.add(s.logits.data(), s.labels.data(), s.n, s.loss);
  }
  s.n = 0;
}

// One batch in context ctx: infer (with tta_flip the mirror images too, the logits averaged),
// the loss, and the logits (as f32) and the loss into `out`. On a GPU queued, nothing waits
// for the device.
void run_batch(Model& model, const Context& ctx, const Batch& batch, const InputNorm& norm,
               bool tta_flip, ResultSlot& out) {
  Tape tape(ctx, /*enabled=*/false);  // the loss: nothing recorded
  const Inference in = infer(model, ctx, batch, norm, tta_flip);
  const VarPtr logits = make_var(in.logits);
  const Tensor loss = softmax_cross_entropy(tape, logits, in.labels, 0.0)->value;  // (1)
  const Tensor z = logits->value.to(DType::f32);  // (n,K) f32: on a GPU a cast there for f16
  if (out.ready) {
    CHECK(loss.dtype() == DType::f32, "evaluate: the loss is " << loss.str() << ", expected f32");
    copy_async(out.d_logits.data(), z.raw(), z.bytes(), ctx.stream);
    copy_async(out.d_loss.data(), loss.raw(), loss.bytes(), ctx.stream);
    out.ready->record(ctx.stream);
  } else {
    out.logits.assign(z.data<float>(), z.data<float>() + z.numel());
    out.loss = loss.item();  // f32, or f64 for an f64 model
  }
  out.labels.assign(batch.labels, batch.labels + batch.n);
  out.n = batch.n;
  // On a GPU, in, logits, z and loss go back to the caching allocator here, while the GPU
  // still uses them: their blocks belong to the stream, so whatever reuses them is queued after.
}

// The loop, the same on both devices, double-buffered: batch b's results come back into slot
// b % 2 while the host tallies batch b-1's from the other slot, so a GPU always has a batch
// queued and the host never waits for a batch it has only just queued. (On the CPU each batch
// is complete when run_batch returns; the tally comes one batch later, in the same order.)
void evaluate_in(Model& model, const Context& ctx, Loader& loader, const EvalOptions& opt,
                 EvalAccumulator& acc) {
  const InputNorm norm(opt.norm, ctx);
  const int K = model.options().classes;
  ResultSlot slots[2] = {ResultSlot(ctx, opt.batch, K), ResultSlot(ctx, opt.batch, K)};
  // Should a batch throw (drain checks the labels), the pinned slots must outlive the copies
  // queued into them: wait for the stream before they go (destroyed first, declared last).
  struct WaitAtExit {
    const Context& ctx;
    ~WaitAtExit() {
      if (ctx.device != Device::cuda) return;
      try {
        Event done;
        done.record(ctx.stream);
        done.synchronize();
      } catch (...) {  // a destructor: an error here is reported by the next call that checks
      }
    }
  } wait_at_exit{ctx};
  for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
    const Batch batch = loader.next(ctx.stream);  // a GPU stream waits for the batch's copy
    ResultSlot& mine = slots[b % 2];              // free: batch b-2 was drained last time round
    if (batch.n > 0) run_batch(model, ctx, batch, norm, opt.tta_flip, mine);
    loader.release(batch, ctx.stream);            // refilled only after the work queued above
    drain(slots[(b + 1) % 2], acc);               // batch b-1, while batch b runs
  }
  drain(slots[0], acc);  // the last batch (the other slot is empty by now)
  drain(slots[1], acc);
}

}  // namespace

EvalResult evaluate(Model& model, std::shared_ptr<const SampleSource> data,
                    const EvalOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelOptions& mo = model.options();
  const ImageSpec& spec = data->spec();
  CHECK(spec.size == mo.H && spec.size == mo.W && spec.channels == mo.C,
        "evaluate: the data gives " << spec.size << "x" << spec.size << "x" << spec.channels
                                    << " images, the model takes " << mo.H << "x" << mo.W
                                    << "x" << mo.C);
  CHECK(opt.batch >= 1, "evaluate: the batch must hold at least one image, got " << opt.batch);
  const SamplerConfig sc = in_order(data->size(), opt.batch);
  LoaderConfig lc;
  lc.threads = opt.threads;
  lc.strict = opt.strict;
  lc.tracer = opt.tracer;
  lc.print_bad = 3;

  EvalAccumulator acc(mo.classes);
  // Where the model was made (ModelOptions::context): its device, stream and kernels. On the
  // legacy default stream (null), which synchronises implicitly with other work on the
  // device, evaluation makes a non-blocking stream of its own, ordered after whatever was
  // queued on the legacy one (the parameters' last writes, say).
  Context ctx = mo.context;
  std::unique_ptr<Stream> own;
  if (ctx.device == Device::cuda) {
    if (ctx.gpu < 0) ctx.gpu = current_device();
    if (!ctx.stream) {
      own = std::make_unique<Stream>(ctx.gpu);
      Event before;
      before.record(nullptr);
      before.wait(own->get());
      ctx.stream = own->get();
    }
    lc.gpu = ctx.gpu;
  }
  const OnDevice on(ctx);
  Loader loader(data, sc, lc);
  evaluate_in(model, ctx, loader, opt, acc);
  const int64_t bad_files = loader.stats().bad_files;
  EvalResult r = acc.result();
  r.bad_files = bad_files;
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
  size_t worst = 0;
  for (size_t k = 0; k < r.class_images.size(); k++) {
    auto acc = [&](size_t i) {
      return r.class_images[i] ? double(r.class_top1[i]) / double(r.class_images[i]) : 1.0;
    };
    if (acc(k) < acc(worst)) worst = k;
  }
  // The name column in terminal columns, not bytes: "Ñandú" and "靴" line up with "cat".
  const size_t width = column_width(class_names, 5);
  std::string s;
  char buf[128];
  std::snprintf(buf, sizeof buf, "  %5s  ", "class");
  s += buf + fit_to_width("name", width);
  std::snprintf(buf, sizeof buf, "  %8s  %7s\n", "images", "top-1");
  s += buf;
  for (size_t k = 0; k < r.class_images.size(); k++) {
    const double acc =
        r.class_images[k] ? 100.0 * double(r.class_top1[k]) / double(r.class_images[k]) : 0;
    std::snprintf(buf, sizeof buf, "  %5zu  ", k);
    s += buf + fit_to_width(k < class_names.size() ? class_names[k] : "", width);
    std::snprintf(buf, sizeof buf, "  %8lld  %6.2f%%%s\n", (long long)r.class_images[k], acc,
                  k == worst && r.class_images.size() > 1 ? "  <- worst" : "");
    s += buf;
  }
  return s;
}

}  // namespace cutrain
