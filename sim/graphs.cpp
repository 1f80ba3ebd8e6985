// Simulated CUDA graphs: a capture collects the tasks submitted to its stream instead of
// running them; the graph is that list, and a launch queues the whole list on a stream.
#include <algorithm>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {

struct Graph {
  std::vector<Task> tasks;
};

// Graphs and their executable copies: two kinds of handle, kept apart so that one passed as
// the other is refused.
Registry<Graph>& graphs() {
  static Registry<Graph> r;
  return r;
}
Registry<Graph>& execs() {
  static Registry<Graph> r;
  return r;
}

}  // namespace
}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) return set_error(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->capturing) return set_error(cudaErrorInvalidValue);
  st->capturing = true;
  st->capture_broken = false;
  st->captured.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(st->mu);
  if (!st->capturing) return set_error(cudaErrorInvalidValue);
  st->capturing = false;
  if (st->capture_broken) {
    st->captured.clear();
    return set_error(cudaErrorStreamCaptureInvalidated);
  }
  auto g = std::make_shared<Graph>();
  g->tasks = std::move(st->captured);
  st->captured.clear();
  *graph = reinterpret_cast<cudaGraph_t>(g.get());
  graphs().add(std::move(g));
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  const std::shared_ptr<Graph> g = graphs().find(graph);
  if (!g) return set_error(cudaErrorInvalidResourceHandle);
  auto copy = std::make_shared<Graph>(*g);
  *exec = reinterpret_cast<cudaGraphExec_t>(copy.get());
  execs().add(std::move(copy));
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  const std::shared_ptr<Graph> g = graphs().find(graph);
  if (!g) return set_error(cudaErrorInvalidResourceHandle);
  size_t n = 0;
  for (const Task& t : g->tasks) n += t.kernel_or_copy;
  if (nodes) {
    n = std::min(n, *count);
    for (size_t i = 0; i < n; i++) nodes[i] = reinterpret_cast<cudaGraphNode_t>(i + 1);
  }
  *count = n;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  const std::shared_ptr<Graph> g = execs().find(exec);
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!g || !st) return set_error(cudaErrorInvalidResourceHandle);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  for (const Task& t : g->tasks) st->submit(t);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return graphs().remove(graph) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return execs().remove(exec) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
