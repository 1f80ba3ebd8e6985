// defines: StepPlanOptions, step_plan and step_plan_text: `cutrain describe MODEL --step`, every
// launch of one training step on a GPU, in order, with its bytes, flops and ideal time on a
// GPU's roofline (kernels/launch_plan.h), then the totals.
//
// The plan is not a second description of the step beside the code: it is the step itself. An
// Engine (train/engine/engine.h) on the CPU, its lanes carrying the GPU's kernel choices and a
// LaunchPlan, runs real steps on a loader of generated images; every op, copy and memset notes
// what its GPU twin queues (each GPU entry point states its cost beside its declaration in
// kernels/), and the plan keeps the second step, the steady one (the first allocates the
// gradients). A GPU test holds the count against the captured CUDA graphs' node counts
// (tests/train/cli/step_plan_gpu_test.cpp); a CPU test pins the default model's count, so a
// change that adds launches shows in CI (tests/train/cli/step_plan_test.cpp).
//
//   cutrain describe default --step --batch 128 --precision fp16 --gpu h100
#pragma once
#include <string>

#include "kernels/launch_plan.h"
#include "nn/context.h"

namespace cutrain {

struct StepPlanOptions {
  std::string model = "default";   // a built-in name or a model description file
  int size = 28, channels = 1;     // the input images: size x size x channels
  int classes = 10;
  int batch = 128;
  std::string precision = "fp16";  // fp16 | fp32
  std::string optimizer = "sgd";   // sgd | nesterov | adamw
  std::string conv = "auto";       // the GPU's kernels, as `train --conv` on a GPU reads them
  std::string linear = "auto";
  std::string kernel_plan;         // per-layer conv kernels (train --kernel-plan's text)
  // Where the walk runs: the CPU (describe), or for the GPU test the GPU itself, with
  // cuda_graph its step captured after the plan's step (StepPlan::graph_nodes).
  Device device = Device::cpu;
  bool cuda_graph = false;
  // On a GPU: the plan's step measured, each row's GPU time from events around its launches
  // (LaunchPlan::time_on), the stream held while the step is queued so that the times are the
  // GPU's and not the host's pace (`describe --step --measure`).
  bool measure = false;
};

struct StepPlan {
  LaunchPlan plan;         // one steady step: the second one launched
  size_t graph_nodes = 0;  // cuda_graph: the nodes of both captured graphs (the third step's)
  bool held = true;        // measure: the stream stayed held until the step was queued (else
                           //   the host waited for the device inside it, and the times
                           //   include that wait)
};

// One steady training step of one replica, walked on o.device (on the CPU a few seconds at
// batch 128: the reference kernels compute it). Throws a UserError for bad options.
StepPlan step_plan(const StepPlanOptions& o);

// The plan as a table: a row per launch (phase, kernel, launches, bytes, flops, ideal time on
// `gpu`, and the measured time when measured), the phases' subtotals, with a measurement the
// kernels' kinds (each kind's ideal and measured time, and their ratio), and the totals:
// launches, bytes, flops, the ideal step time (the launches' ideal times added: one stream)
// and the images per second it would allow (and the measured ones).
std::string step_plan_text(const LaunchPlan& plan, const StepPlanOptions& o, const Roofline& gpu);

}  // namespace cutrain
