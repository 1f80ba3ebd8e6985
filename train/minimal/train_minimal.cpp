// cutrain_minimal: the whole training loop of cutrain in one file, to be read top to bottom.
//
// Read the list, start the loader, then per step: the model's input, forward, the loss,
// backward, the optimizer step; evaluate after each epoch and write a checkpoint that `cutrain
// eval` and `cutrain predict` accept. It computes what `cutrain train` computes with one replica
// and the same flags, bit for bit (tests/train/minimal/minimal_test.cpp holds it to that).
//
//   bin/cutrain_minimal --train data/fashion-mnist/train.txt --out runs/minimal --epochs 2
//
// Its recipe is cutrain train's default: SGD with momentum 0.9 and weight decay 5e-4, a
// cosine learning rate after a warm-up of one epoch, label smoothing 0.1; fp32 on the CPU,
// fp16 with a dynamic loss scale on a GPU. It takes the flags in `flags` below (their defaults
// are cutrain train's) and refuses every other rather than ignore it.
//
// What it leaves out, and where the full version of each part lives:
//  - replicas, MPI, --sync-bn, --accum: train/engine/engine.cpp (Engine::forward_backward,
//    Engine::update), train/replicas/ (the collective);
//  - steps queued ahead of the host, their records read later (here the host waits for each
//    step's loss): train/engine/lane.h (Lane::publish), train/engine/trainer.cpp (Trainer::launch);
//  - the batch's copy on the loader's copy stream (here the input is made on the host, then
//    copied): train/engine/batch_input.cpp (model_input); CUDA graphs: train/engine/engine_graph.h;
//  - the trace, progress line, metrics file and report page: train/run/reporter.cpp (RunReporter);
//  - the background writer, best.h5, --resume, signals: train/run/run.cpp (save_checkpoint,
//    run_training), train/checkpoint/checkpoint.h (CheckpointWriter);
//  - the full evaluation (loss, top-5, per class, --tta): train/engine/evaluate.cpp (evaluate);
//  - the other options (--ema, --balance, --optimizer, ...): train/setup/config.h (TrainConfig).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "data/loader.h"                   // Loader, Batch, SamplerConfig
#include "kernels/check.h"                 // USER_CHECK, UserError
#include "kernels/gpu.h"                   // Stream
#include "kernels/input.h"                 // input_normalize_crop_cpu
#include "kernels/parallel.h"              // ComputeThreadsScope
#include "kernels/printable.h"             // printable_message
#include "nn/autograd.h"                   // Tape, make_var
#include "nn/device_step.h"                // DeviceStep: the loss scale, the skip decision
#include "nn/dispatch.h"                   // dispatch_float
#include "nn/loss_scaler.h"                // LossScalerConfig, loss_scaler_check
#include "nn/model.h"                      // build_model, Model
#include "nn/model_spec.h"                 // parse_model_spec
#include "nn/ops.h"                        // softmax_cross_entropy, top1_correct
#include "nn/optim.h"                      // make_optimizer, Optimizer
#include "nn/schedule.h"                   // ScheduleConfig, lr_at
#include "train/checkpoint/checkpoint.h"   // Checkpoint, write_checkpoint
#include "train/setup/config.h"            // TrainConfig: every option and its default
#include "train/setup/device.h"            // choose_device, the thread counts
#include "train/setup/kernel_choice.h"     // choose_conv_kernels
#include "train/setup/resolve.h"           // resolve_config, train_image_spec, eval_image_spec
#include "train/setup/val_split.h"         // open_train_source, open_val_source

using namespace cutrain;

// The model's input for a batch from the loader: each image's crop window cut out, flipped
// when the sampler drew a flip, and normalised, (n,S,S,C) in the model's dtype (this is
// model_input in train/engine/batch_input.cpp, for a batch on the host), then the labels (n).
static std::pair<Tensor, Tensor> to_input(const Batch& b, const TrainConfig& cfg, DType dtype,
                                          const Context& ctx) {
  const std::vector<float> mean(cfg.mean.begin(), cfg.mean.end());
  const std::vector<float> sd(cfg.std.begin(), cfg.std.end());
  Tensor x = Tensor::empty({b.n, b.size, b.size, b.channels}, dtype);  // (n,S,S,C)
  Tensor labels = Tensor::empty({b.n}, DType::i32);                    // (n) i32
  std::memcpy(labels.raw(), b.labels, labels.bytes());
  dispatch_float(dtype, [&](auto tag) {
    input_normalize_crop_cpu<decltype(tag)>(b.n, b.side, b.side, b.channels, b.size, b.images,
                                            b.crops, mean, sd, x.data<decltype(tag)>());
  });
  return {x.to(ctx), labels.to(ctx)};
}

// A flag's value into a field of the configuration: text as it is, a number read whole.
template <typename T>
static std::function<void(const std::string&, const char*)> into(T& field) {
  return [&field](const std::string& flag, const char* text) {
    std::istringstream in(text);
    if constexpr (std::is_same_v<T, std::string>) field = text;
    else USER_CHECK((in >> field) && (in >> std::ws).eof(), flag << " takes a " <<
                    (std::is_integral_v<T> ? "whole " : "") << "number, not '" << text << "'");
  };
}

int main(int argc, char** argv) try {
  // ---- 1. The flags: cutrain train's, with its defaults (train/setup/config.h) -----------
  TrainConfig cfg;
  cfg.out = "runs/minimal";
  const std::map<std::string, std::function<void(const std::string&, const char*)>> flags = {
      {"--train", into(cfg.train)}, {"--val", into(cfg.val)}, {"--out", into(cfg.out)},
      {"--model", into(cfg.model)}, {"--device", into(cfg.device)},
      {"--precision", into(cfg.precision)}, {"--batch", into(cfg.batch)},
      {"--epochs", into(cfg.epochs)}, {"--lr", into(cfg.lr)}, {"--momentum", into(cfg.momentum)},
      {"--wd", into(cfg.wd)}, {"--warmup", into(cfg.warmup)},
      {"--label-smoothing", into(cfg.label_smoothing)}, {"--seed", into(cfg.seed)},
      {"--limit-train", into(cfg.limit_train)}, {"--limit-val", into(cfg.limit_val)},
      {"--threads", into(cfg.threads)}, {"--compute-threads", into(cfg.compute_threads)}};
  std::string known = " --augment";  // the one flag without a value: random crops and flips
  for (const auto& f : flags) known += " " + f.first;
  for (int i = 1; i < argc; i++) {
    const std::string flag = argv[i];
    cfg.augment = cfg.augment || flag == "--augment";
    if (flag == "--augment") continue;
    USER_CHECK(flags.count(flag), "unknown option '" << flag << "': this one-file trainer takes"
                                  << known << "; `cutrain train` takes the rest");
    USER_CHECK(i + 1 < argc && std::strncmp(argv[i + 1], "--", 2), flag << " needs a value");
    flags.at(flag)(flag, argv[++i]);
  }

  // ---- 2. The run's facts: device, configuration completed from the data ------------------
  validate_config(cfg);  // every value in its range, --train given
  std::error_code made;
  std::filesystem::create_directories(cfg.out, made);
  USER_CHECK(!made, "cannot create the folder '" << cfg.out << "': " << made.message());
  USER_CHECK(newest_checkpoint(cfg.out).empty(), "--out " << cfg.out << " holds checkpoints "
                                                 << "of an earlier run: choose another --out");
  const RunDevice device = choose_device(cfg.device, cfg.precision);
  if (!device.notice.empty()) std::fprintf(stderr, "%s\n", device.notice.c_str());
  std::vector<std::string> notes = resolve_config(cfg);  // size, classes, mean/std, lr, wd, ...
  cfg.compute_threads = run_compute_threads(cfg, device);
  choose_conv_kernels(cfg, device, /*resuming=*/false, notes);  // GPU, --conv auto: timed
  const ComputeThreadsScope compute_threads(cfg.compute_threads);  // the CPU kernels' threads
  std::printf("cutrain_minimal: %s, %d compute threads\n", device.describe().c_str(),
              cfg.compute_threads);
  for (const std::string& n : notes) std::printf("  %s\n", n.c_str());

  // Where every op runs (nn/context.h): the CPU, or a stream of the GPU.
  const bool gpu = device.device == Device::cuda;
  std::optional<Stream> stream;  // the GPU's queue of work
  Context ctx = Context::cpu();
  if (gpu) ctx = Context::cuda(stream.emplace(device.gpu).get(), ConvImpl::tc, LinearImpl::tc,
                               device.gpu);
  ctx.conv = parse_conv_impl(cfg.conv, gpu);
  ctx.linear = parse_linear_impl(cfg.linear, gpu);
  const OnDevice on(ctx);

  // ---- 3. The data: the training list (and the validation list) ---------------------------
  const auto train = open_train_source(cfg, train_image_spec(cfg));
  const auto val = open_val_source(cfg, eval_image_spec(cfg));  // null without --val
  USER_CHECK(train->size() >= cfg.batch, "--batch " << cfg.batch << " is larger than the "
                                         << train->size() << " training images");
  const int64_t steps_per_epoch = train->size() / cfg.batch;  // the last partial batch dropped
  const int64_t total_steps = steps_per_epoch * cfg.epochs;

  // ---- 4. The model, the optimizer, the step state, the schedule --------------------------
  // H, W, C, classes, fp32|fp16 (working weights, activations, gradients), seed, where it lives
  const ModelOptions mo{cfg.size, cfg.size, cfg.channels, cfg.classes, device.dtype, cfg.seed, ctx};
  std::unique_ptr<Model> model = build_model(parse_model_spec(cfg.model_text, cfg.model), mo);
  if (!cfg.kernel_plan.empty()) model->set_kernel_plan(parse_kernel_plan(cfg.kernel_plan));
  std::unique_ptr<Optimizer> opt = make_optimizer(cfg.optimizer, model->parameters(), cfg.lr,
                                                  cfg.momentum, cfg.wd);  // fp32 masters
  // The loss scale (nn/loss_scaler.h): fp16 starts at 2^16, halves and skips a step whose
  // gradients overflow, doubles after 2000 clean steps. fp32 keeps 1 and stops at the first
  // inf/NaN (as loss_scaler_config in train/engine/engine_replicas.cpp).
  LossScalerConfig scaler;
  scaler.max_consecutive_skips = cfg.max_skips;
  if (device.dtype != DType::f16)
    scaler.dynamic = false, scaler.init = 1, scaler.max_consecutive_skips = 1;
  DeviceStep ds(scaler, int(model->parameters().size()), ctx);
  const int64_t warmup =  // steps, as the Trainer's (train/engine/trainer.cpp)
      std::min(total_steps - 1, int64_t(std::llround(cfg.warmup * double(steps_per_epoch))));
  const ScheduleConfig schedule{cfg.schedule, cfg.lr, warmup, total_steps};  // nn/schedule.h
  std::printf("%s, %lld steps of %d images (%lld an epoch)\n", cfg.model.c_str(),
              (long long)total_steps, cfg.batch, (long long)steps_per_epoch);

  // ---- 5. The loader: decode threads filling a ring of batches in the sampler's order -----
  SamplerConfig sc;
  sc.num_samples = train->size();
  sc.batch_size = cfg.batch;
  sc.seed = cfg.seed;  // each epoch's permutation and each image's crop and flip
  LoaderConfig lc;
  lc.threads = run_decode_threads(cfg.threads, device, 1);
  Loader loader(train, sc, lc);

  for (int64_t step = 0; step < total_steps; step++) {
    // ---- 6. One step: input, forward, loss, backward, update -------------------------------
    const Batch batch = loader.next();  // waits for the decode threads
    auto [x, labels] = to_input(batch, cfg, device.dtype, ctx);  // (n,S,S,C), (n)
    Tape tape(ctx);                                              // records forward's ops
    // training: BatchNorm normalises with the batch's statistics and updates its running ones
    VarPtr logits = model->forward(tape, make_var(x), /*training=*/true);  // (n,classes)
    VarPtr loss = softmax_cross_entropy(tape, logits, labels, cfg.label_smoothing);  // (1) fp32
    // d(loss) = the loss scale x this batch's share of the step's loss (1: the whole of it)
    tape.backward(loss, ds.seed(1.0, loss->value.dtype()));  // every parameter's gradient
    const double lr = lr_at(schedule, step);  // warm-up, then cosine
    ds.set_lr(lr);
    ds.begin();                   // every parameter's overflow flag cleared
    opt->check_and_decide(ds);    // unscale, look for inf/NaN: skip the step or not
    opt->apply(ds);               // SGD on the fp32 masters (and their fp16 copies), grads zeroed
    loader.release(batch);
    const StepState state = ds.read();  // on a GPU this waits for the step
    loss_scaler_check(scaler, state.scaler, step,  // stops after too many skips in a row
                      state.skip ? opt->parameter_name(size_t(state.first_bad)) : "");
    std::printf("step %lld/%lld  loss %.9g  lr %.6g  scale %g%s\n", (long long)step + 1,
                (long long)total_steps, loss->value.item(), lr, double(state.scale_used),
                state.skip ? "  skipped (inf/NaN gradient)" : "");

    if ((step + 1) % steps_per_epoch != 0) continue;
    const int64_t epoch = (step + 1) / steps_per_epoch;
    // ---- 7. After each epoch: the validation top-1, in order, no gradients ----------------
    if (val) {
      Loader vl(val, in_order(val->size(), std::max(cfg.batch, 256)), lc);
      int64_t correct = 0;
      for (int64_t b = 0; b < vl.sampler().batches_per_epoch(); b++) {
        const Batch vb = vl.next();
        auto [vx, vlabels] = to_input(vb, cfg, device.dtype, ctx);
        Tape inference(ctx, /*enabled=*/false);  // nothing recorded
        correct += top1_correct(model->forward(inference, make_var(vx), false)->value, vlabels);
        vl.release(vb);
      }
      std::printf("epoch %lld: validation top-1 %.2f%% of %lld images\n", (long long)epoch,
                  100.0 * double(correct) / double(val->size()), (long long)val->size());
    }
    // ---- 8. The checkpoint (train/checkpoint/checkpoint.h has its layout) -----------------
    Checkpoint c;
    c.config_json = config_to_json_text(cfg);  // eval and predict rebuild the model from it
    c.step = step + 1;
    c.epoch = epoch;
    c.cursor = loader.cursor();
    c.seed = cfg.seed;
    // Every tensor of the state, as state_tensors in train/engine/replica.cpp: the weights,
    std::vector<std::pair<std::string, Tensor*>> all;
    for (const VarPtr& p : model->parameters()) all.emplace_back(p->name, &p->value);
    for (auto& t : opt->state_tensors()) all.push_back(t);  // the masters, the velocities
    for (auto& t : model->batchnorm_tensors()) all.push_back(t);  // the running statistics
    for (auto& [name, t] : all) c.tensors.emplace_back(name, t->to(Context::cpu()));
    const LossScalerState& ls = state.scaler;  // what a --resume would need besides
    c.scalars = {{"loss_scale", ls.scale}, {"scaler_clean_steps", ls.clean_steps},
                 {"scaler_consecutive_skips", ls.consecutive_skips},
                 {"scaler_skipped_total", double(ls.skipped_total)},
                 {"optimizer_steps_taken", double(state.steps_taken)}};
    const std::string path = checkpoint_path(cfg.out, c.step);
    write_checkpoint(c, path);  // a temporary file, fsync, rename: never a torn file
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
} catch (const std::exception& e) {  // the user's to fix (2): a flag, a file, the data; else
  const bool user = dynamic_cast<const UserError*>(&e) != nullptr;  // a bug or the machine (1)
  std::fprintf(stderr, "cutrain_minimal: %s%s\n", user ? "" : "internal error: ",
               printable_message(e.what()).c_str());  // names from files shown, never obeyed
  return user ? 2 : 1;
}
