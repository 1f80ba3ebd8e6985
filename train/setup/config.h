// defines: TrainConfig (every option of `cutrain train`), its JSON form (config.json beside
// the checkpoints and inside each one), validate_config, resolve_defaults, and resume_config
// (a saved configuration plus the options a resumed run may change).
//
// A configuration is written twice: as the user gave it, and resolved. Fields left "to be
// worked out" (size 0, mean/std empty, pad -1, lr 0, wd -1, warmup -1, classes 0) are filled
// by resolve_config() (train/setup/resolve.h) before training starts, and the resolved form is what
// is printed, saved and put in checkpoints. So a checkpoint says exactly how its run was made, and
// `--resume`, `cutrain eval` and `cutrain predict` rebuild the same model with the same input
// normalisation without looking at the training data again.
//
// JSON keys are the option names without the leading dashes, '-' written as '_' ("--lr" ->
// "lr", "--label-smoothing" -> "label_smoothing"), plus the resolved "model_text" (the model
// description itself, so a checkpoint of a model read from a file needs no file) and
// "class_names".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cutrain {

struct TrainConfig {
  // ---- data -----------------------------------------------------------------------------
  std::string train;                // an image list, a folder with a folder per class, or a pack (.h5)
  std::string val;                  // the same kinds; "" = no evaluation
  double val_split = 0;             // > 0: hold out this fraction of --train (stratified, fixed
                                    //   by --seed) as the validation data; needs no --val
  std::string csv_columns;          // "PATH,LABEL" columns of CSV lists (names or 0-based
                                    //   indices); "": the defaults (data/image_list.h)
  int size = 0;                     // images are size x size; 0: from the data
  int channels = 0;                 // 1 or 3; 0: from the data
  std::vector<double> mean, std;    // per channel, of pixels scaled to [0, 1]; empty: measured
  bool augment = false;             // random crop and horizontal flip for training batches
  int pad = -1;                     // random crop reaches pad pixels beyond the image (zeros);
                                    //   -1: size / 8 with --augment and no --resize, else 0
  int resize = 0;                   // shorter side before cropping (0: size)
  int64_t limit_train = 0;          // use only the first N samples (0: all)
  int64_t limit_val = 0;
  bool strict = false;              // a bad image stops the run instead of being skipped

  // ---- model and device -----------------------------------------------------------------
  std::string model = "default";    // a built-in name or a model description file
  std::string device = "auto";      // auto | cpu | cuda
  std::string devices;              // data-parallel replicas, one per entry: "cpu,cpu" or GPU
                                    //   ordinals "0,1" (repeats allowed); "": one, on --device
  std::string precision = "auto";   // auto | fp16 | fp32 (auto: fp16 on cuda, fp32 on cpu)
  std::string conv = "auto";        // conv2d: auto | direct | tc | cudnn | onednn (kernels/impl.h);
                                    //   auto on a GPU: timed per layer (setup/kernel_choice.h)
  std::string linear = "auto";      // linear: auto | direct | tc | cublas | onednn
  std::string kernel_plan;          // conv kernels per layer and pass on a GPU, as text
                                    //   ("conv2=tc,cudnn,cudnn;...", nn/model.h: KernelPlan),
                                    //   over --conv for the layers it names; "": none. Given
                                    //   as a run folder, resolve_config copies that run's
  bool cuda_graph = true;           // replay the step of a full batch from CUDA graphs
                                    //   (train/engine/engine_graph.h) where one replica trains
                                    //   on a GPU in one process; elsewhere (the CPU, replicas,
                                    //   mpirun) it does nothing: the header says which.
                                    //   --no-cuda-graph: every kernel launched by the host

  // ---- optimisation ---------------------------------------------------------------------
  std::string optimizer = "sgd";    // sgd | nesterov | adamw
  double lr = 0;                    // the peak learning rate, after the warm-up;
                                    //   0: 0.1 for sgd and nesterov, 0.001 for adamw
  double momentum = 0.9;            // sgd, nesterov
  double wd = -1;                   // weight decay (L2 for SGD, decoupled for AdamW);
                                    //   -1: 5e-4 for sgd and nesterov, 0.05 for adamw
  std::string schedule = "cosine";  // cosine | linear | constant | onecycle
  double warmup = -1;               // epochs of linear warm-up (fractions allowed);
                                    //   -1: 1 epoch, or 0 for onecycle (it has its own)
  int epochs = 10;
  int batch = 128;                  // images per optimizer step
  int accum = 1;                    // ... computed as this many micro-batches (batch / accum)
  bool sync_bn = false;             // replicas: BatchNorm's statistics over the global batch
                                    //   (every replica's shard), not each replica's own
  double label_smoothing = 0.1;
  std::string balance = "none";     // none | sampler (class-balanced epochs) | loss (inverse-
                                    //   frequency class weights in the loss); train/setup/balance.h
  int max_skips = 30;               // fp16: stop after this many steps in a row skipped for inf/NaN
                                    //   gradients (nothing is being learnt)
  uint64_t seed = 1;                // weights, batch order and augmentation
  double ema = 0;                   // > 0: keep an exponential moving average of the weights
                                    //   with this decay (nn/optim.h), evaluated beside them;
                                    //   0: none
  std::string tta = "none";         // none | flip: evaluation averages each image's logits
                                    //   with its mirror image's (train/engine/evaluate.h)
  std::string recipe;               // the preset the run started from (train/setup/recipe.h),
                                    //   its values already applied; "": none

  // ---- the run --------------------------------------------------------------------------
  int threads = 0;                  // decode threads (0: train/setup/device.h, run_decode_threads)
  int compute_threads = 0;          // OpenMP threads of the CPU kernels, per replica (0: the
                                    //   cores shared out among the replicas computing at once;
                                    //   resolved before the run, so a resume keeps the count)
  std::string out = "runs/train";   // checkpoints, metrics, config.json
  int keep = 3;                     // checkpoints kept besides the best
  std::string resume;               // a run folder: continue from its newest checkpoint
  std::string metrics;              // JSON lines of steps and evaluations ("": OUT/metrics.jsonl)
  std::string trace;                // a Chrome/Perfetto trace of the run ("": none)
  bool tensorboard = true;          // TensorBoard event files in OUT (data/tensorboard.h)
  int log_every = 50;               // steps between progress lines
  int checkpoint_every = 0;         // steps between extra checkpoints (0: after each epoch only)
  double collective_timeout = 600;  // seconds a replica or rank waits in a collective for the
                                    //   others before the run stops, naming them (0: no limit;
                                    //   600, as PyTorch's NCCL process groups)
  int check_replicas = 0;           // debug: compare the replicas' weights every N steps (0: never)

  // ---- resolved (filled before training; see the top of this file) ----------------------
  int classes = 0;
  std::vector<std::string> class_names;
  std::string model_text;           // the model description
};

// The entries of --devices: "cpu" or a GPU ordinal ("0"), one per replica; {} for "". Throws
// naming the entry when one is neither.
std::vector<std::string> parse_devices(const std::string& devices);
// How many replicas a configuration trains: the entries of --devices, or 1.
int replica_count(const TrainConfig& c);
// The GPU ordinal of each replica of --devices 0,1,... ({} when --devices is empty or cpu).
std::vector<int> gpu_ordinals(const std::string& devices);

// The ranges of the numeric options (of train, and of the other commands that share them).
// The upper bounds are far beyond any sensible run, and keep the data's products of them
// (size x size x channels x batch x ring slots) well inside int64; the memory a run needs,
// its model's layers included, is checked against the machine separately
// (train/setup/memory_plan.h).
constexpr int kMaxSize = 4096;      // --size, --resize: 4096x4096 images
constexpr int kMaxBatch = 1 << 16;  // --batch
constexpr int kMaxThreads = 256;    // --threads, --compute-threads
constexpr int kMaxEpochs = 1000000;
constexpr int kMaxReplicas = 64;    // entries of --devices
constexpr double kMaxLr = 10;       // --lr: beyond it every optimizer here diverges at once
constexpr double kMaxWd = 1;        // --wd: a decay of the whole weight each step

// Throws cutrain::UserError with one message listing every problem found ("--batch 100 is not
// a multiple of --accum 3", "--threads must be in [0, 256], got 400", "--lr must be a finite
// number in [0, 10], got inf", ...).
void validate_config(const TrainConfig& c);

void to_json(nlohmann::json& j, const TrainConfig& c);
// The optimizer-dependent defaults: lr, wd and warmup when left at "auto".
void resolve_defaults(TrainConfig& c);

// Unknown keys and values of the wrong type are errors naming the key; missing keys keep
// their defaults.
void from_json(const nlohmann::json& j, TrainConfig& c);

std::string config_to_json_text(const TrainConfig& c);  // pretty-printed, ends with "\n"
TrainConfig config_from_json_text(const std::string& text, const std::string& where);

// The JSON key of a command-line option: "--label-smoothing" -> "label_smoothing".
std::string option_key(const std::string& option);

// The options a resumed run may change: they do not alter what is computed, only how long it
// runs and where and how it reports (--epochs, --threads, --compute-threads, --out, --keep,
// --metrics, --trace, --tensorboard, --log-every, --checkpoint-every, --device, --devices,
// --check-replicas, --cuda-graph, --max-skips). --compute-threads changes oneDNN's bits (train/README.md), not
// the reference kernels'.
bool may_change_on_resume(const std::string& key);

// The configuration of a resumed run: `saved` (from the checkpoint) with the keys in `given`
// (the options on the command line) taken from `cli`. A given option that may not change
// (may_change_on_resume) must equal the saved value, else cutrain::Error names it, both
// values, and why: the resumed run would not continue the same computation.
TrainConfig resume_config(const TrainConfig& saved, const TrainConfig& cli,
                          const std::vector<std::string>& given);

}  // namespace cutrain
