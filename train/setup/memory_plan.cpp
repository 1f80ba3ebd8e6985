#include "train/setup/memory_plan.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "data/units.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/model.h"
#include "nn/model_spec.h"
#include "train/replicas/mpi.h"
#include "train/setup/resolve.h"
#include "train/setup/val_split.h"

namespace cutrain {

namespace {

constexpr int kRingSlots = 4;  // LoaderConfig::ring's default, which the trainer keeps

std::string images_str(int64_t n, int size, int channels) {
  return std::to_string(n) + " images of " + std::to_string(size) + "x" + std::to_string(size) +
         "x" + std::to_string(channels);
}

// The first number on the line of /proc/meminfo that starts with `key` ("MemAvailable:"), in
// bytes; -1 when there is none.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  return -1;
}

// A file holding one number ("max", missing or unreadable: -1).
int64_t number_in(const std::string& file) {
  std::ifstream f(file);
  std::string v;
  if (!(f >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return -1;
  }
}

// The value of `key` in a memory.stat file ("inactive_file 653746176"); 0 when absent.
int64_t stat_value(const std::string& file, const std::string& key) {
  std::ifstream f(file);
  std::string k;
  int64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

// What the memory cgroups this process is in (and every cgroup above them) still let it take:
// limit - (usage - inactive page cache, which the kernel reclaims first). -1 when no limit is
// set. cgroup v2 ("0::/path" in /proc/self/cgroup: memory.max, memory.current) and v1
// ("N:memory:/path": memory.limit_in_bytes, memory.usage_in_bytes).
int64_t cgroup_room() {
  struct Kind {
    std::string root, limit, usage, inactive;
  };
  std::ifstream f("/proc/self/cgroup");
  int64_t room = -1;
  for (std::string line; std::getline(f, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    std::vector<Kind> kinds;
    if (controllers.empty())  // v2: mounted at /sys/fs/cgroup, or beside v1 as "unified"
      for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
        kinds.push_back({root, "memory.max", "memory.current", "inactive_file"});
    else if (controllers == "memory" || controllers.find("memory,") != std::string::npos ||
             controllers.find(",memory") != std::string::npos)
      kinds.push_back({"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                       "total_inactive_file"});
    for (const Kind& k : kinds)
      for (std::string p = path;;) {  // the cgroup, then each one above it
        const std::string dir = k.root + (p == "/" ? "" : p);
        const int64_t limit = number_in(dir + "/" + k.limit), used = number_in(dir + "/" + k.usage);
        if (limit >= 0 && used >= 0 && limit < (int64_t(1) << 60)) {  // v1 says "none" as ~2^63
          const int64_t r = std::max<int64_t>(
              0, limit - (used - stat_value(dir + "/memory.stat", k.inactive)));
          room = room < 0 ? r : std::min(room, r);
        }
        if (p == "/" || p.empty()) break;
        const size_t slash = p.rfind('/');
        p = slash == 0 ? "/" : p.substr(0, slash);
      }
  }
  return room;
}

// Bytes as an int64, at most 2^62 (more than any machine: the run is refused either way).
int64_t saturated(double bytes) {
  return bytes >= double(int64_t(1) << 62) ? int64_t(1) << 62 : int64_t(bytes);
}

}  // namespace

int64_t MemoryPlan::total(const std::vector<MemoryItem>& items) {
  double n = 0;
  for (const MemoryItem& i : items) n += double(i.bytes);
  return saturated(n);
}

MemoryPlan plan_memory(const TrainConfig& cfg, Device device, DType dtype) {
  CHECK(cfg.size > 0 && cfg.channels > 0 && cfg.classes > 0 && !cfg.model_text.empty(),
        "plan_memory: the configuration is not resolved yet");
  const int R = replica_count(cfg);
  const int64_t image = int64_t(cfg.size) * cfg.size * cfg.channels;  // bytes, uint8
  // The training ring holds uncut images (data/image.h): with --augment, the crop window and
  // its margin of --pad pixels on each side.
  const int side = uncut_side(train_image_spec(cfg));
  const int64_t uncut = int64_t(side) * side * cfg.channels;
  const int64_t shard = (cfg.batch + R - 1) / R;
  const int64_t micro = std::max<int64_t>(1, shard / cfg.accum);
  const int64_t eval_batch = std::max(cfg.batch, 256);  // Trainer::evaluate
  const bool gpu = device == Device::cuda;

  // The layers' outputs for one image, from the model's shapes alone (no parameter memory).
  ModelOptions mo;
  mo.H = mo.W = cfg.size;
  mo.C = cfg.channels;
  mo.classes = cfg.classes;
  mo.dtype = dtype;
  mo.shapes_only = true;
  const auto model = build_model(parse_model_spec(cfg.model_text, cfg.model), mo);
  // In double: a model file may ask for layers whose products overflow int64 (then the run
  // is refused as too big, not waved through by a wrapped number).
  double per_image = double(image);  // the input, converted
  for (const TableRow& r : model->rows()) per_image += double(r.out.H) * r.out.W * r.out.C;
  const double elt = double(dtype_size(dtype));

  MemoryPlan p;
  const int64_t ring = int64_t(R) * kRingSlots * shard * uncut;
  const std::string ring_detail = std::to_string(R * kRingSlots) + " slots of " +
                                  images_str(shard, side, cfg.channels);
  p.host.push_back({"batch ring", ring_detail, ring});
  if (has_validation(cfg))
    p.host.push_back({"evaluation ring",
                      std::to_string(kRingSlots) + " slots of " +
                          images_str(eval_batch, cfg.size, cfg.channels),
                      kRingSlots * eval_batch * image});
  // Every replica trains; only replica 0 evaluates.
  const std::string each =
      R > 1 && !gpu ? ", on each of " + std::to_string(R) + " replicas" : "";
  const double train_act = 3 * double(micro) * per_image * elt * (gpu ? 1 : R);
  const double eval_act = !has_validation(cfg) ? 0 : double(eval_batch) * per_image * elt;
  const MemoryItem act{"activations",
                       train_act >= eval_act
                           ? "micro-batches of " + std::to_string(micro) + " images, " +
                                 std::to_string(saturated(per_image)) +
                                 " values each, kept for backward" + each
                           : "evaluation batches of " + std::to_string(eval_batch) + " images",
                       saturated(std::max(train_act, eval_act))};
  // 16 bytes a parameter (weights, gradient, master, state); --ema: an fp32 average on each
  // replica, and replica 0's model of it for evaluation (8 more)
  const double per_param = 16.0 + (cfg.ema > 0 ? 8.0 : 0.0);
  const MemoryItem params{"parameters",
                          std::to_string(model->parameter_count()) +
                              " with gradients and optimizer state" +
                              (cfg.ema > 0 ? " and their moving average" : "") + each,
                          saturated(per_param * double(model->parameter_count()) * (gpu ? 1 : R))};
  if (gpu) {
    p.device.push_back({"batch ring", std::to_string(kRingSlots) + " slots of " +
                                          images_str(shard, side, cfg.channels),
                        kRingSlots * shard * uncut});
    p.device.push_back(act);
    p.device.push_back(params);
  } else {
    p.host.push_back(act);
    p.host.push_back(params);
  }
  return p;
}

namespace {

std::string breakdown(const std::vector<MemoryItem>& items) {
  std::ostringstream os;
  for (size_t i = 0; i < items.size(); i++)
    os << (i ? "; " : "") << items[i].what << " " << bytes_str(items[i].bytes) << " ("
       << items[i].detail << ")";
  return os.str();
}

// What to lower: the largest item's options.
std::string advice(const std::vector<MemoryItem>& items) {
  const auto big = std::max_element(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return a.bytes < b.bytes;
  });
  if (big->what == "activations")
    return "lower --batch or --size, or split each step with --accum";
  if (big->what == "parameters") return "use a smaller --model or --size";
  return "lower --batch or --size";
}

}  // namespace

void check_memory(const MemoryPlan& plan, int64_t host_available,
                  const std::vector<int64_t>& gpu_available, const std::vector<int>& gpus) {
  const int64_t host = MemoryPlan::total(plan.host);
  USER_CHECK(host_available < 0 || host <= host_available,
             "the run needs about " << bytes_str(host) << " of memory (" << breakdown(plan.host)
                                    << "); this machine has " << bytes_str(host_available)
                                    << " available: " << advice(plan.host));
  const int64_t dev = MemoryPlan::total(plan.device);
  for (size_t r = 0; r < gpu_available.size() && !plan.device.empty(); r++) {
    const int64_t on_gpu = dev * std::count(gpus.begin(), gpus.end(), gpus[r]);  // --devices 0,0
    USER_CHECK(on_gpu <= gpu_available[r],
               "cuda:" << gpus[r] << " needs about " << bytes_str(on_gpu) << " for the run ("
                       << (on_gpu > dev ? "its replicas each need " : "") << breakdown(plan.device)
                       << ") and has " << bytes_str(gpu_available[r]) << " free: "
                       << advice(plan.device));
  }
}

MemoryPlan check_run_memory(const TrainConfig& cfg, const RunDevice& device) {
  MemoryPlan plan = plan_memory(cfg, device.device, device.dtype);
  std::vector<int> gpus;
  std::vector<int64_t> free;
  // Under mpirun the processes of this machine share its memory, and those on one GPU its
  // memory: each must fit in its part.
  const Mpi* mpi = device.mpi;
  int64_t host = host_memory_available();
  if (mpi && host > 0) host /= mpi->local_size();
  if (device.device == Device::cuda) {
    gpus = gpu_ordinals(cfg.devices);
    if (mpi) {  // this rank's GPU, once for each local rank on it (run/run_setup.cpp: choose_run_device)
      int sharing = 0;
      for (int r = 0; r < mpi->local_size(); r++)
        sharing += !gpus.empty() || r % std::max(1, gpu_count()) == device.gpu;
      gpus.assign(size_t(sharing), device.gpu);
    }
    if (gpus.empty()) gpus.assign(size_t(replica_count(cfg)), device.gpu);
    for (int d : gpus)  // a GPU that does not exist is refused elsewhere, by name
      free.push_back(d < gpu_count() ? int64_t(gpu_memory_available(d)) : INT64_MAX);
  }
  check_memory(plan, host, free, gpus);
  return plan;
}

int64_t host_memory_available() {
  const int64_t avail = meminfo_bytes("MemAvailable:"), room = cgroup_room();
  if (room < 0) return avail;
  return avail < 0 ? room : std::min(avail, room);
}

}  // namespace cutrain
