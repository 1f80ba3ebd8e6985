// Engine with --cuda-graph: capturing the step as two CUDA graphs, and replaying the first
// (train/engine/engine_graph.h).
#include "train/engine/engine_graph.h"

#include "kernels/check.h"

namespace cutrain {

bool Engine::graph_ready(Replica& rep, int images, int64_t step) {
  if (!graphs_ || images != cfg_.batch || !graphs_->refused.empty()) return false;
  Graphs& g = *graphs_;
  if (g.forward_backward) return true;
  if (g.eager_full < Graphs::kWarmup) return false;
  TraceSpan span(tracer, "capture CUDA graphs", "train");
  // The batch as the loader delivers it: uncut images (side P) and their windows.
  const size_t P = size_t(rep.batch.side), C = size_t(rep.batch.channels);
  const size_t image_bytes = size_t(images) * P * P * C;
  const cudaStream_t stream = rep.lane->stream();
  const int device = rep.lane->device();
  g.images = DeviceBuffer(image_bytes, device, stream);
  g.crops = DeviceBuffer(size_t(images) * sizeof(InputCrop), device, stream);
  g.labels = DeviceBuffer(size_t(images) * sizeof(int32_t), device, stream);
  g.record = DeviceBuffer(sizeof(StepRecord), device, stream);
  // The graphs read their own input buffers and write their own record (engine_graph.h);
  // capture runs nothing, so what the buffers hold does not matter yet.
  const Batch batch = rep.batch;
  rep.batch.d_images = g.images.data();
  rep.batch.d_crops = static_cast<const InputCrop*>(g.crops.data());
  rep.batch.d_labels = static_cast<const int32_t*>(g.labels.data());
  StepRecord* rec = static_cast<StepRecord*>(g.record.data());
  auto graph = std::make_unique<CudaGraph>(), update_graph = std::make_unique<CudaGraph>();
  std::string why = graph->capture(stream, [&] {
    rep.lane->clear(rec);
    forward_backward(rep, images, rec);
  });
  if (why.empty()) why = update_graph->capture(stream, [&] { update(true, {rec}); });
  rep.batch = batch;
  if (!why.empty()) {
    g.refused = why;
    if (notice)
      notice("cutrain: --cuda-graph: CUDA refused to capture the step (" + why +
             "); training goes on without the graphs");
    return false;
  }
  g.forward_backward = std::move(graph);
  g.update = std::move(update_graph);
  if (notice)
    notice("cutrain: --cuda-graph: the step captured at step " + std::to_string(step) +
           " as two CUDA graphs (forward and backward: " +
           std::to_string(g.forward_backward->nodes()) +
           " nodes; the update: " + std::to_string(g.update->nodes()) +
           " nodes), replayed for every full batch from now on");
  return true;
}

std::string Engine::graph_description() const {
  if (device_.device != Device::cuda) return "";
  if (graphs_)
    return "CUDA graphs: on (the step of a full batch is captured after " +
           std::to_string(Graphs::kWarmup) + " launched steps and replayed; --no-cuda-graph "
           "launches every kernel)";
  if (!cfg_.cuda_graph) return "CUDA graphs: off (--no-cuda-graph)";
  return "CUDA graphs: off (" + std::to_string(world_) + " replicas" +
         (device_.mpi ? " under mpirun" : "") + ": a graph holds the step of one replica)";
}

size_t Engine::graph_nodes() const {
  if (!graphs_ || !graphs_->forward_backward) return 0;
  return graphs_->forward_backward->nodes() + graphs_->update->nodes();
}

StepRecord* Engine::replay_forward_backward(Replica& rep) {
  Graphs& g = *graphs_;
  const cudaStream_t stream = rep.lane->stream();  // it waits for the loader's copy (next())
  copy_async(g.images.data(), rep.batch.d_images, g.images.bytes(), stream);
  // The windows were checked on the host by the loader (the graph's kernel cannot).
  copy_async(g.crops.data(), rep.batch.d_crops, g.crops.bytes(), stream);
  copy_async(g.labels.data(), rep.batch.d_labels, g.labels.bytes(), stream);
  g.forward_backward->launch(stream);
  return static_cast<StepRecord*>(g.record.data());
}

}  // namespace cutrain
