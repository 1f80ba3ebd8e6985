#include "train/setup/config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <type_traits>

#include "data/image_list.h"
#include "kernels/check.h"
#include "kernels/printable.h"
#include "nn/model.h"

namespace cutrain {

namespace {
bool one_of(const std::string& v, std::initializer_list<const char*> choices) {
  for (const char* c : choices)
    if (v == c) return true;
  return false;
}
}  // namespace

namespace {
// A JSON value as a message quotes it: strings may hold what a file or the command line put
// there (invalid UTF-8, replaced rather than thrown over; bidi controls), made printable.
std::string shown(const nlohmann::json& v) {
  return printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// The entries of --devices, or a message saying which entry is bad.
std::vector<std::string> split_devices(const std::string& devices, std::string* problem) {
  std::vector<std::string> out;
  if (devices.empty()) return out;
  size_t begin = 0;
  for (;;) {
    const size_t end = devices.find(',', begin);
    const std::string e = devices.substr(begin, end == std::string::npos ? end : end - begin);
    const bool ordinal = !e.empty() && e.size() <= 4 &&
                         e.find_first_not_of("0123456789") == std::string::npos;
    if (e != "cpu" && !ordinal) {
      *problem = "--devices " + printable(devices) + ": '" + printable(e) +
                 "' is neither cpu nor a GPU ordinal (e.g. --devices 0,1 or cpu,cpu)";
      return {};
    }
    out.push_back(e);
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}
}  // namespace

std::vector<std::string> parse_devices(const std::string& devices) {
  std::string problem;
  std::vector<std::string> d = split_devices(devices, &problem);
  USER_CHECK(problem.empty(), problem);
  return d;
}

std::vector<int> gpu_ordinals(const std::string& devices) {
  std::vector<int> out;
  for (const std::string& e : parse_devices(devices))
    if (e != "cpu") out.push_back(std::stoi(e));
  return out;
}

int replica_count(const TrainConfig& c) {
  return c.devices.empty() ? 1 : int(parse_devices(c.devices).size());
}

void validate_config(const TrainConfig& c) {
  std::vector<std::string> problems;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(printable(what));  // one line each: the options' values shown
  };
  if (!c.kernel_plan.empty() && !std::filesystem::is_directory(c.kernel_plan)) {
    try {  // the layers' names are checked against the model when it is built
      parse_kernel_plan(c.kernel_plan);
    } catch (const Error& e) {
      problems.push_back("--kernel-plan: " + printable(e.what()));
    }
  }
  auto str = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  // "--batch must be in [1, 65536], got 0": integers in [lo, hi].
  auto in_range = [&](const char* option, int64_t v, int64_t lo, int64_t hi,
                      const std::string& why = "") {
    need(v >= lo && v <= hi, std::string(option) + " must be in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got " + std::to_string(v) + why);
  };
  // Real numbers: finite (no nan, no inf), in [lo, hi] or [lo, hi).
  auto real_in = [&](const char* option, double v, double lo, double hi, bool hi_open,
                     const std::string& why = "") {
    const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
    need(ok, std::string(option) + " must be a finite number in [" + str(lo) + ", " + str(hi) +
                 (hi_open ? ")" : "]") + ", got " + str(v) + why);
  };
  need(!c.train.empty(), "--train is required: an image list, a folder of class folders or a pack");
  const std::string columns = csv_columns_problem(c.csv_columns);
  need(columns.empty(), "--csv-columns: " + columns);
  in_range("--size", c.size, 0, kMaxSize, " (0: from the data)");
  need(c.channels == 0 || c.channels == 1 || c.channels == 3,
       "--channels must be 1 or 3, got " + std::to_string(c.channels));
  need(c.mean.size() == c.std.size(), "--mean and --std need one value per channel each, got " +
                                          std::to_string(c.mean.size()) + " and " +
                                          std::to_string(c.std.size()) + " values");
  if (c.channels > 0 && !c.mean.empty())
    need(int(c.mean.size()) == c.channels,
         "--mean/--std have " + std::to_string(c.mean.size()) + " values for " +
             std::to_string(c.channels) + " channels");
  // Of pixels scaled to [0, 1]: a mean outside [-1, 2] or a deviation above 10 is a mistake
  // (pixel values given instead of fractions, say).
  for (double m : c.mean) real_in("--mean", m, -1, 2, false, " (of pixel/255)");
  for (double s : c.std)
    need(std::isfinite(s) && s > 0 && s <= 10,
         "--std values must be finite and in (0, 10] (of pixel/255), got " + str(s));
  in_range("--pad", c.pad, -1, kMaxSize, " (-1: automatic)");
  if (c.size > 0 && c.augment)
    need(c.pad < c.size, "--pad " + std::to_string(c.pad) + " must be below --size " +
                             std::to_string(c.size) + ": a random crop must keep some image");
  in_range("--resize", c.resize, 0, kMaxSize, " (0: --size)");
  if (c.size > 0 && c.resize > 0)
    need(c.resize >= c.size, "--resize " + std::to_string(c.resize) + " is smaller than --size " +
                                 std::to_string(c.size) + ": the crop is cut from the resized image");
  need(c.limit_train >= 0 && c.limit_val >= 0, "--limit-train and --limit-val must be >= 0");
  real_in("--val-split", c.val_split, 0, 0.9, false, " (0: none)");
  need(c.val_split == 0 || c.val.empty(),
       "--val-split holds validation data out of --train; with --val " + c.val +
           " as well there would be two validation sets: give one of them");
  need(!c.model.empty(), "--model must name a built-in model or a description file");
  need(one_of(c.device, {"auto", "cpu", "cuda"}), "--device " + c.device + ": expected auto, cpu or cuda");
  need(one_of(c.precision, {"auto", "fp16", "fp32"}),
       "--precision " + c.precision + ": expected auto, fp16 or fp32");
  need(one_of(c.conv, {"auto", "direct", "tc", "cudnn", "onednn"}),
       "--conv " + c.conv + ": expected auto, direct, tc, cudnn or onednn");
  need(one_of(c.linear, {"auto", "direct", "tc", "cublas", "onednn"}),
       "--linear " + c.linear + ": expected auto, direct, tc, cublas or onednn");
  need(one_of(c.optimizer, {"sgd", "nesterov", "adamw"}),
       "--optimizer " + c.optimizer + ": expected sgd, nesterov or adamw");
  need(one_of(c.schedule, {"cosine", "linear", "constant", "onecycle"}),
       "--schedule " + c.schedule + ": expected cosine, linear, constant or onecycle");
  real_in("--lr", c.lr, 0, kMaxLr, false, " (0: the optimizer's default)");
  real_in("--momentum", c.momentum, 0, 1, true);
  if (c.wd != -1) real_in("--wd", c.wd, 0, kMaxWd, false, " (-1: the optimizer's default)");
  in_range("--epochs", c.epochs, 1, kMaxEpochs);
  if (c.warmup != -1) real_in("--warmup", c.warmup, 0, kMaxEpochs, false, " epochs (-1: automatic)");
  need(!(c.schedule == "onecycle" && c.warmup > 0),
       "--schedule onecycle has its own warm-up (the first 30% of the steps): leave out --warmup");
  in_range("--batch", c.batch, 1, kMaxBatch);
  in_range("--accum", c.accum, 1, std::max(1, c.batch), " (at most --batch)");
  if (c.batch >= 1 && c.accum >= 1)
    need(c.batch % c.accum == 0, "--batch " + std::to_string(c.batch) +
                                     " is not a multiple of --accum " + std::to_string(c.accum) +
                                     ": each step is --accum micro-batches of equal size");
  std::string devices_problem;
  const std::vector<std::string> d = split_devices(c.devices, &devices_problem);
  need(devices_problem.empty(), devices_problem);
  need(int(d.size()) <= kMaxReplicas, "--devices lists " + std::to_string(d.size()) +
                                          " replicas; at most " + std::to_string(kMaxReplicas));
  const int replicas = std::max<int>(1, int(d.size()));
  bool any_cpu = false, any_gpu = false;
  for (const std::string& e : d) (e == "cpu" ? any_cpu : any_gpu) = true;
  need(!(any_cpu && any_gpu),
       "--devices " + c.devices + " mixes cpu and GPUs: replicas must all be of one kind");
  need(!any_cpu || c.device != "cuda",
       "--devices " + c.devices + " (CPU replicas) contradicts --device cuda");
  need(!any_gpu || c.device != "cpu",
       "--devices " + c.devices + " (GPU replicas) contradicts --device cpu");
  if (replicas > 1 && c.batch >= 1 && c.accum >= 1)
    need(c.batch % (int64_t(replicas) * c.accum) == 0,  // 2 * 2^30 overflowed an int
         "--batch " + std::to_string(c.batch) + " is not divisible by the " +
             std::to_string(replicas) + " replicas of --devices " + c.devices +
             (c.accum > 1 ? " times --accum " + std::to_string(c.accum) : std::string()) +
             ": the global batch is split evenly over the replicas" +
             (c.accum > 1 ? ", and each replica's share into --accum micro-batches" : ""));
  in_range("--check-replicas", c.check_replicas, 0, INT_MAX, " (0: never)");
  real_in("--collective-timeout", c.collective_timeout, 0, 1e9, false, " (0: no limit)");
  in_range("--max-skips", c.max_skips, 1, 1000000);
  real_in("--label-smoothing", c.label_smoothing, 0, 1, true);
  need(c.ema == 0 || (std::isfinite(c.ema) && c.ema > 0 && c.ema < 1),
       "--ema must be a decay in (0, 1), such as 0.999, or 0 for none; got " + str(c.ema));
  need(one_of(c.tta, {"none", "flip"}), "--tta " + c.tta + ": expected none or flip");
  need(one_of(c.balance, {"none", "sampler", "loss"}),
       "--balance " + c.balance + ": expected none, sampler or loss");
  in_range("--threads", c.threads, 0, kMaxThreads, " (0: automatic)");
  in_range("--compute-threads", c.compute_threads, 0, kMaxThreads, " (0: automatic)");
  need(!c.out.empty(), "--out must name a folder");
  in_range("--keep", c.keep, 1, 1000000);
  in_range("--log-every", c.log_every, 1, INT_MAX);
  in_range("--checkpoint-every", c.checkpoint_every, 0, INT_MAX, " (0: after each epoch only)");
  if (problems.empty()) return;
  std::string msg = "bad training configuration:";
  for (const std::string& p : problems) msg += "\n  " + p;
  USER_CHECK(false, msg);
}

void resolve_defaults(TrainConfig& c) {
  const bool adam = c.optimizer == "adamw";
  if (c.lr == 0) c.lr = adam ? 1e-3 : 0.1;
  if (c.wd < 0) c.wd = adam ? 0.05 : 5e-4;
  if (c.warmup < 0) c.warmup = c.schedule == "onecycle" ? 0 : 1;
}

// One list of (key, member) pairs drives both directions, so they cannot drift apart.
template <typename Config, typename F>
void for_each_field(Config& c, F&& f) {
  f("train", c.train), f("val", c.val), f("val_split", c.val_split);
  f("size", c.size), f("channels", c.channels);
  f("csv_columns", c.csv_columns);
  f("mean", c.mean), f("std", c.std), f("augment", c.augment), f("pad", c.pad);
  f("resize", c.resize), f("limit_train", c.limit_train), f("limit_val", c.limit_val);
  f("strict", c.strict), f("model", c.model), f("device", c.device);
  f("devices", c.devices);
  f("precision", c.precision), f("conv", c.conv), f("linear", c.linear);
  f("cuda_graph", c.cuda_graph), f("kernel_plan", c.kernel_plan);
  f("optimizer", c.optimizer), f("lr", c.lr);
  f("momentum", c.momentum), f("wd", c.wd), f("schedule", c.schedule), f("warmup", c.warmup);
  f("epochs", c.epochs), f("batch", c.batch), f("accum", c.accum);
  f("sync_bn", c.sync_bn);
  f("label_smoothing", c.label_smoothing), f("balance", c.balance), f("max_skips", c.max_skips);
  f("seed", c.seed), f("ema", c.ema), f("tta", c.tta), f("recipe", c.recipe);
  f("threads", c.threads), f("compute_threads", c.compute_threads);
  f("out", c.out), f("keep", c.keep), f("resume", c.resume), f("metrics", c.metrics);
  f("trace", c.trace), f("tensorboard", c.tensorboard), f("log_every", c.log_every);
  f("checkpoint_every", c.checkpoint_every), f("check_replicas", c.check_replicas);
  f("collective_timeout", c.collective_timeout);
  f("classes", c.classes);
  f("class_names", c.class_names), f("model_text", c.model_text);
}

void to_json(nlohmann::json& j, const TrainConfig& c) {
  j = nlohmann::json::object();
  for_each_field(c, [&](const char* key, const auto& v) { j[key] = v; });
}

namespace {
// nlohmann's get_to turns any JSON number into an integer with a cast: 1e30 or 2.5 into an int
// would be undefined behaviour or silently wrong. An integer field takes an integer in its
// type's range; everything else is left to get_to's own type checks.
template <typename T>
void check_integer(const nlohmann::json& v, const T&, const char* key) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using L = std::numeric_limits<T>;
    bool fits = !v.is_number();  // not a number at all: get_to's own type check says so
    if (v.is_number_unsigned()) {
      fits = v.get<uint64_t>() <= uint64_t(L::max());
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      fits = i < 0 ? i >= int64_t(L::min()) : uint64_t(i) <= uint64_t(L::max());
    }
    USER_CHECK(fits, "configuration key '" << key << "': " << shown(v) << " is not an integer in ["
                                           << +L::min() << ", " << +L::max() << "]");
  }
}
}  // namespace

void from_json(const nlohmann::json& j, TrainConfig& c) {
  USER_CHECK(j.is_object(), "a training configuration must be a JSON object, got " << j.type_name());
  std::set<std::string> known;
  for_each_field(c, [&](const char* key, auto& v) {
    known.insert(key);
    auto it = j.find(key);
    if (it == j.end()) return;
    check_integer(*it, v, key);
    try {
      it->get_to(v);
    } catch (const nlohmann::json::exception& e) {
      USER_CHECK(false, "configuration key '" << key << "': " << shown(*it) << " is not a "
                                              << "value of the right type (" << printable(e.what())
                                              << ")");
    }
  });
  for (auto it = j.begin(); it != j.end(); ++it)
    USER_CHECK(known.count(it.key()), "configuration: unknown key '" << printable(it.key()) << "'");
}

std::string config_to_json_text(const TrainConfig& c) {
  nlohmann::json j = c;
  return j.dump(2) + "\n";
}

TrainConfig config_from_json_text(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    USER_CHECK(false, printable(where) << ": not valid JSON: " << printable(e.what()));
  }
  TrainConfig c;
  try {
    from_json(j, c);
  } catch (const Error& e) {
    rethrow_with_context(e, printable(where));
  }
  return c;
}

std::string option_key(const std::string& option) {
  std::string k = option.substr(option.find_first_not_of('-'));
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

bool may_change_on_resume(const std::string& key) {
  static const std::set<std::string> ok = {"epochs", "threads", "compute_threads", "out",
                                           "keep", "resume", "metrics", "trace", "tensorboard", "log_every",
                                           "checkpoint_every", "device", "devices",
                                           "check_replicas", "cuda_graph", "max_skips",
                                           "collective_timeout"};
  return ok.count(key) > 0;
}

TrainConfig resume_config(const TrainConfig& saved, const TrainConfig& cli,
                          const std::vector<std::string>& given) {
  const nlohmann::json s = saved, c = cli;
  nlohmann::json merged = s;
  for (const std::string& key : given) {
    USER_CHECK(c.contains(key), "resume: '" << printable(key) << "' is not a training option");
    if (may_change_on_resume(key)) {
      merged[key] = c[key];
    } else if (c[key] != s[key]) {
      std::string option = key;  // the command line's spelling: --sync-bn for sync_bn
      std::replace(option.begin(), option.end(), '_', '-');
      USER_CHECK(false,
                 "--" << option << " " << shown(c[key]) << " differs from the checkpoint's "
                      << shown(s[key]) << ": a resumed run continues the computation it "
                      << "started, so only --epochs, --threads, --compute-threads, --out, "
                      << "--keep, --metrics, --trace, --tensorboard, --log-every, "
                      << "--checkpoint-every, --device, --devices, --check-replicas, "
                      << "--cuda-graph and --max-skips may change");
    }
  }
  return merged.get<TrainConfig>();
}

}  // namespace cutrain
