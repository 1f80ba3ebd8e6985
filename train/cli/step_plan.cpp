// `cutrain describe MODEL --step`: one training step walked on the CPU, noting what a GPU
// launches (train/cli/step_plan.h).
#include "train/cli/step_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "data/source.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/model_spec.h"
#include "train/engine/engine.h"
#include "train/setup/config.h"

namespace cutrain {

namespace {

// Generated images for the walk: sample i's pixel (y, x, c) is (7i + 13y + 29x + 53c) mod 256,
// label i mod classes. Nothing is read from disk; the values only have to be ordinary (no
// constant channel, no inf) so that the step is a normal one.
class PatternSource : public SampleSource {
 public:
  PatternSource(int64_t n, int classes, ImageSpec spec) : n_(n), classes_(classes), spec_(spec) {}
  int64_t size() const override { return n_; }
  int32_t label(int64_t i) const override { return int32_t(i % classes_); }
  std::string name(int64_t i) const override { return "pattern[" + std::to_string(i) + "]"; }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t i, uint64_t, uint8_t* out, InputCrop& window,
                    StageTimes&) const override {
    const int side = uncut_side(spec_), C = spec_.channels;
    for (int y = 0; y < side; y++)
      for (int x = 0; x < side; x++)
        for (int c = 0; c < C; c++)
          out[(size_t(y) * side + x) * C + c] = uint8_t((7 * i + 13 * y + 29 * x + 53 * c) & 255);
    window = InputCrop{};
    return DecodeResult{};
  }

 private:
  int64_t n_;
  int classes_;
  ImageSpec spec_;
};

std::string model_text_of(const std::string& model) {
  std::string text;  // the description as parsed: one canonical line per layer
  for (const LayerSpec& l : load_model_spec(model).layers) text += layer_spec_str(l) + "\n";
  return text;
}

const char* plural_launches(int n) { return n == 1 ? "launch" : "launches"; }

// v with an SI prefix: "1.47 MB", "57.80 MFLOP", "512 B".
std::string si_text(double v, const char* unit) {
  char s[32];
  if (v >= 1e9) std::snprintf(s, sizeof s, "%.2f G%s", v / 1e9, unit);
  else if (v >= 1e6) std::snprintf(s, sizeof s, "%.2f M%s", v / 1e6, unit);
  else if (v >= 1e3) std::snprintf(s, sizeof s, "%.1f k%s", v / 1e3, unit);
  else std::snprintf(s, sizeof s, "%.0f%s%s", v, *unit ? " " : "", unit);
  return s;
}

}  // namespace

StepPlan step_plan(const StepPlanOptions& o) {
  USER_CHECK(o.size >= 1 && o.channels >= 1 && o.classes >= 1,
             "describe --step: the input and the classes must be positive");
  USER_CHECK(o.batch >= 1, "describe --step: --batch must be >= 1, got " << o.batch);
  USER_CHECK(o.precision == "fp16" || o.precision == "fp32",
             "describe --step: --precision fp16 or fp32, got " << o.precision);
  USER_CHECK(!o.measure || o.device == Device::cuda,
             "describe --step --measure times the step on a GPU: there is none to time here ("
                 << (gpu_usable() ? std::string("it was asked to walk on the CPU")
                                  : gpu_unavailable_reason())
                 << ")");
  TrainConfig cfg;
  cfg.model = o.model;
  cfg.model_text = model_text_of(o.model);
  cfg.size = o.size;
  cfg.channels = o.channels;
  cfg.classes = o.classes;
  cfg.mean.assign(size_t(o.channels), 0.5);
  cfg.std.assign(size_t(o.channels), 0.25);
  cfg.batch = o.batch;
  cfg.precision = o.precision;
  cfg.optimizer = o.optimizer;
  cfg.conv = o.conv;
  cfg.linear = o.linear;
  cfg.kernel_plan = o.kernel_plan;  // (the layers' names are checked as the model is built)
  cfg.device = o.device == Device::cpu ? "cpu" : "cuda";
  cfg.cuda_graph = o.cuda_graph;
  resolve_defaults(cfg);  // (the optimizer's name and the kernels' are checked as they are made)

  RunDevice device;
  device.device = o.device;
  device.dtype = o.precision == "fp16" ? DType::f16 : DType::f32;
  StepPlan out;
  LaunchPlan& plan = out.plan;
  Engine engine(cfg, device, ClassBalance{}, &plan);

  ImageSpec spec;
  spec.size = o.size;
  spec.channels = o.channels;
  auto source = std::make_shared<PatternSource>(2 * int64_t(o.batch), o.classes, spec);
  SamplerConfig sc;
  sc.num_samples = source->size();
  sc.batch_size = o.batch;
  sc.seed = cfg.seed;
  sc.shuffle = false;
  LoaderConfig lc;
  lc.threads = 1;
  lc.ring = 2;
  lc.print_bad = 0;
  if (o.device == Device::cuda) lc.gpu = engine.replica(0).lane->device();
  engine.replica(0).loader = std::make_unique<Loader>(source, sc, lc);

  // Step 0 allocates the gradients; step 1 is the steady step that every later one repeats;
  // with cuda_graph, step 2 is captured (Engine::Graphs::kWarmup launched steps before).
  std::deque<StepResult> done;
  for (int64_t step = 0; step < (o.cuda_graph ? 3 : 2); step++) {
    StepResult r;
    r.step = step;
    r.lr = cfg.lr;
    plan.record(step == 1);
    if (step == 1 && o.measure) {
      const cudaStream_t stream = engine.replica(0).lane->stream();
      StreamHold hold(stream);
      plan.time_on(stream);
      engine.launch(r);
      hold.release();
      out.held = !hold.timed_out();
      plan.finish_timing();
    } else {
      engine.launch(r);
    }
    engine.collect(SIZE_MAX, done);
  }
  plan.record(false);
  out.graph_nodes = engine.graph_nodes();
  return out;
}

std::string step_plan_text(const LaunchPlan& plan, const StepPlanOptions& o, const Roofline& gpu) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "One training step of %s: batch %d, %s, one replica, conv %s%s, linear %s\n"
                "Ideal times on the roofline of the %s (%.0f TFLOP/s fp16 tensor, %.1f TFLOP/s "
                "fp32, %.2f TB/s):\n\n",
                o.model.c_str(), o.batch, o.precision.c_str(), o.conv.c_str(),
                o.kernel_plan.empty() ? "" : (" (" + o.kernel_plan + ")").c_str(),
                o.linear.c_str(),
                gpu.full_name, gpu.tensor_fp16 / 1e12, gpu.fp32 / 1e12, gpu.bandwidth / 1e12);
  out += line;
  bool measured = false;
  for (const LaunchPlan::Row& r : plan.rows()) measured = measured || r.measured_s >= 0;
  std::snprintf(line, sizeof line, "%4s  %-10s %-48s %8s %10s %10s %9s%s\n", "#", "phase",
                "kernel", "launches", "bytes", "flops", "ideal us", measured ? "  measured us" : "");
  out += line;
  struct Sum {
    int launches = 0;
    double bytes = 0, flops = 0, seconds = 0, measured = 0;
  };
  std::vector<std::string> order, kinds;  // phases, kernels' kinds, in order of appearance
  std::map<std::string, Sum> phases, by_kind;
  Sum total;
  int estimated = 0, n = 0;
  for (const LaunchPlan::Row& r : plan.rows()) {
    const LaunchCost& c = r.cost;
    const double s = ideal_seconds(c, gpu);
    char took[32] = "";
    if (measured && r.measured_s >= 0) std::snprintf(took, sizeof took, " %12.2f", r.measured_s * 1e6);
    else if (measured) std::snprintf(took, sizeof took, " %12s", "-");
    std::snprintf(line, sizeof line, "%4d  %-10s %-48s %8d %10s %10s %9.2f%s%s\n", ++n,
                  r.phase.c_str(), c.kernel.c_str(), c.launches, si_text(c.bytes, "B").c_str(),
                  si_text(c.flops, "").c_str(), s * 1e6, took,
                  c.estimated ? "  (launches estimated)" : "");
    out += line;
    if (!phases.count(r.phase)) order.push_back(r.phase);
    if (!by_kind.count(c.kernel)) kinds.push_back(c.kernel);
    for (Sum* sum : {&phases[r.phase], &by_kind[c.kernel], &total}) {
      sum->launches += c.launches;
      sum->bytes += c.bytes;
      sum->flops += c.flops;
      sum->seconds += s;
      sum->measured += std::max(0.0, r.measured_s);
    }
    if (c.estimated) estimated += c.launches;
  }
  out += "\nBy phase:\n";
  for (const std::string& p : order) {
    const Sum& s = phases[p];
    std::snprintf(line, sizeof line, "  %-10s %4d %-8s %10s %12s %9.2f us", p.c_str(),
                  s.launches, plural_launches(s.launches), si_text(s.bytes, "B").c_str(),
                  si_text(s.flops, "FLOP").c_str(),
                  s.seconds * 1e6);
    out += line;
    if (measured) {
      std::snprintf(line, sizeof line, "  measured %9.2f us", s.measured * 1e6);
      out += line;
    }
    out += "\n";
  }
  if (measured) {  // where the time goes, against where it should
    out += "\nBy kind of kernel (measured against ideal):\n";
    for (const std::string& k : kinds) {
      const Sum& s = by_kind[k];
      std::snprintf(line, sizeof line, "  %-48s %4d %-8s  ideal %9.2f us  measured %9.2f us"
                    "  %7.1fx\n", k.c_str(), s.launches, plural_launches(s.launches),
                    s.seconds * 1e6, s.measured * 1e6,
                    s.seconds > 0 ? s.measured / s.seconds : 0.0);
      out += line;
    }
  }
  const double per_s = total.seconds > 0 ? o.batch / total.seconds : 0;
  std::snprintf(line, sizeof line,
                "\nTotal: %d launches, %s moved, %s; ideal step %.2f us (each launch at its "
                "roofline, one after another) = %.2f million images/s\n",
                total.launches, si_text(total.bytes, "B").c_str(),
                si_text(total.flops, "FLOP").c_str(), total.seconds * 1e6, per_s / 1e6);
  out += line;
  if (measured) {
    std::snprintf(line, sizeof line,
                  "Measured: %.2f us on the step's stream (the launches back to back, the host "
                  "held off) = %.0f images/s, %.1fx the ideal\n",
                  total.measured * 1e6, total.measured > 0 ? o.batch / total.measured : 0.0,
                  total.seconds > 0 ? total.measured / total.seconds : 0.0);
    out += line;
    if (gpu_simulated())
      out += "Simulated: the GPU is cutrain's simulator (sim/README.md): the measured times are "
             "the host's running the simulated kernels, meaningless for a GPU.\n";
  }
  if (estimated > 0) {
    std::snprintf(line, sizeof line,
                  "%d of the launches are a vendor library's, estimated (kernels/launch_plan.h)\n",
                  estimated);
    out += line;
  }
  out += "Launch overhead is not in the ideal times: at a few microseconds a launch, the count "
         "is the other half of the step's budget.\n";
  return out;
}

}  // namespace cutrain
