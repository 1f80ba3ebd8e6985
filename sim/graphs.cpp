// Simulated CUDA graphs: a capture collects the tasks submitted to its streams instead of
// running them, each with the nodes it depends on (a stream forked into the capture by an
// event wait adds nodes of its own: runtime.h's Capture). The graph is the list of nodes in
// the order they were submitted, which is an order that keeps every dependency; a launch
// queues the whole list on one stream, so a replay runs the nodes in their dependency order.
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
  static auto* r = new Registry<Graph>;  // never destroyed (streams.cpp says why)
  return *r;
}
Registry<Graph>& execs() {
  static auto* r = new Registry<Graph>;
  return *r;
}

}  // namespace
}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) return set_error(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->capture) return set_error(cudaErrorInvalidValue);
  st->capture = std::make_shared<Capture>();
  st->capture->origin = st.get();
  st->frontier.clear();
  return cudaSuccess;
}

namespace {
// The nodes `from` depends on, directly or not, and `from` themselves.
std::vector<bool> ancestors(const Capture& c, const std::vector<size_t>& from) {
  std::vector<bool> seen(c.nodes.size(), false);
  std::vector<size_t> todo = from;
  while (!todo.empty()) {
    const size_t n = todo.back();
    todo.pop_back();
    if (seen[n]) continue;
    seen[n] = true;
    for (size_t d : c.deps[n]) todo.push_back(d);
  }
  return seen;
}
}  // namespace

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(st->mu);
  if (!st->capture) return set_error(cudaErrorInvalidValue);
  const std::shared_ptr<Capture> c = st->capture;
  if (c->origin != st.get()) return set_error(cudaErrorStreamCaptureUnmatched);
  // Every stream forked into the capture must have been joined back: its last nodes are
  // among those the origin's last nodes wait for. Either way they leave the capture now.
  bool unjoined = false;
  std::vector<std::shared_ptr<Stream>> members;
  {
    std::lock_guard<std::mutex> l(c->mu);
    for (const auto& m : c->members)
      if (auto p = m.lock()) members.push_back(std::move(p));
  }
  for (const auto& m : members) {
    std::lock_guard<std::mutex> ml(m->mu);
    if (m->capture != c) continue;
    std::lock_guard<std::mutex> l(c->mu);
    const std::vector<bool> joined = ancestors(*c, st->frontier);
    for (size_t n : m->frontier) unjoined = unjoined || !joined[n];
    m->capture = nullptr;
    m->frontier.clear();
  }
  st->capture = nullptr;
  st->frontier.clear();
  std::lock_guard<std::mutex> l(c->mu);
  if (c->broken) return set_error(cudaErrorStreamCaptureInvalidated);
  if (unjoined) return set_error(cudaErrorStreamCaptureUnjoined);
  auto g = std::make_shared<Graph>();
  g->tasks = std::move(c->nodes);
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
