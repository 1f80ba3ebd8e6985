// The collective between GPU processes (train/replicas/mpi_gpu.h): the choice, the host-staged
// MPI ring, and NCCL (loaded with dlopen, in CUDA builds that found nccl.h).
#include "train/replicas/mpi_gpu.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <type_traits>
#include <vector>

#include "kernels/check.h"
#include "kernels/ring_reduce.h"
#include "nn/tensor.h"
#include "train/replicas/collective.h"
#include "train/replicas/mpi.h"

#if defined(CUTRAIN_CUDA) && defined(CUTRAIN_NCCL)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace cutrain {

GpuTransport choose_gpu_transport(const std::vector<std::string>& places,
                                  const std::string& nccl_missing, bool nccl_off) {
  GpuTransport t;
  if (nccl_off) {
    t.why = "CUTRAIN_NCCL=0";
    return t;
  }
  if (!nccl_missing.empty()) {
    t.why = nccl_missing;
    return t;
  }
  for (size_t a = 0; a < places.size(); a++)
    for (size_t b = a + 1; b < places.size(); b++)
      if (places[a] == places[b]) {
        t.why = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " share GPU " +
                places[a] + ", and NCCL needs a GPU per rank";
        return t;
      }
  t.nccl = true;
  return t;
}

namespace {

// One replica per process on one GPU: its place among the ranks, its compute stream, and the
// marks (an event per tag, recorded on the compute stream) the two collectives below wait for.
class RankOnGpu : public Collective {
 public:
  RankOnGpu(const Mpi& mpi, int device, cudaStream_t stream)
      : mpi_(mpi), device_(device), stream_(stream) {}
  int size() const override { return mpi_.size(); }
  void mark(int, int tag) override {
    auto it = marks_.find(tag);
    if (it == marks_.end()) {
      const DeviceGuard on(device_);
      it = marks_.emplace(tag, Event(false)).first;
    }
    it->second.record(stream_);
  }

 protected:
  const Event& marked(int tag) const { return marks_.at(tag); }
  const Mpi& mpi_;
  int device_;
  cudaStream_t stream_;  // the compute stream

 private:
  std::map<int, Event> marks_;  // per tag: re-recorded each step
};

// Each collective waits for its mark (host blocks), copies the buffer to the host, reduces it
// there with the MPI ring, and copies it back before the host queues anything after it: the
// compute stream finds the result in place, so wait() has nothing to do.
class HostStagedRing : public RankOnGpu {
 public:
  HostStagedRing(const Mpi& mpi, int device, cudaStream_t stream, std::string why)
      : RankOnGpu(mpi, device, stream), ring_(make_mpi_ring(mpi)), why_(std::move(why)) {}
  void all_reduce(int tag, const std::vector<void*>& data, int64_t n, DType dtype,
                  bool average) override {
    CHECK(data.size() == 1, "host-staged ring: " << data.size() << " buffers in one process");
    const size_t bytes = size_t(n) * dtype_size(dtype);
    host_.resize(bytes);
    marked(tag).synchronize();
    copy_sync(host_.data(), data[0], bytes);
    ring_->all_reduce(tag, {host_.data()}, n, dtype, average);
    copy_sync(data[0], host_.data(), bytes);
  }
  void any(int tag, const std::vector<int32_t*>& flags, int64_t n) override {
    CHECK(flags.size() == 1, "host-staged ring: " << flags.size() << " flag sets in one process");
    flags_.resize(size_t(n));
    marked(tag).synchronize();
    copy_sync(flags_.data(), flags[0], size_t(n) * sizeof(int32_t));
    mpi_.bitwise_or(flags_.data(), n);
    copy_sync(flags[0], flags_.data(), size_t(n) * sizeof(int32_t));
  }
  void wait(int) override {}
  std::string describe() const override {
    return std::to_string(size()) + " processes (mpirun), a GPU replica each, on the MPI ring "
           "through host memory (" + why_ + ")";
  }

 private:
  std::unique_ptr<Collective> ring_;  // the MPI ring, on host buffers
  std::string why_;
  std::vector<unsigned char> host_;   // pageable: copy_sync is complete on return
  std::vector<int32_t> flags_;
};

#if defined(CUTRAIN_CUDA) && defined(CUTRAIN_NCCL)

// The few NCCL functions cutrain calls, from libnccl.so.2 loaded at run time (nccl.h gives
// their types): a machine without NCCL still runs cutrain, on the host-staged ring.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
};

// The API, or null with why it could not be loaded (once per process).
const NcclApi* nccl_api(std::string* why) {
  static std::string error;
  static const NcclApi* api = [] () -> const NcclApi* {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = std::string("NCCL could not be loaded: ") + (e ? e : "libnccl.so.2 not found");
      return nullptr;
    }
    static NcclApi a;
    bool ok = true;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && ok) error = std::string("libnccl.so.2 has no ") + name, ok = false;
    };
    load(a.get_unique_id, "ncclGetUniqueId");
    load(a.comm_init_rank, "ncclCommInitRank");
    load(a.all_reduce, "ncclAllReduce");
    load(a.comm_destroy, "ncclCommDestroy");
    load(a.comm_abort, "ncclCommAbort");
    load(a.error_string, "ncclGetErrorString");
    load(a.get_version, "ncclGetVersion");
    load(a.get_async_error, "ncclCommGetAsyncError");
    return ok ? &a : nullptr;
  }();
  if (!api && why) *why = error;
  return api;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat;
    case DType::f16: return ncclHalf;
    case DType::f64: return ncclDouble;
    default: CHECK(false, "NCCL all-reduce of " << dtype_name(t) << " buffers");
  }
  return ncclFloat;
}

class NcclRing : public RankOnGpu {
 public:
  NcclRing(const Mpi& mpi, const NcclApi& api, int device, cudaStream_t stream)
      : RankOnGpu(mpi, device, stream), api_(api) {
    const DeviceGuard on(device_);
    comm_stream_ = std::make_unique<Stream>(device_);
    done_ = std::make_unique<Event>(false);
    ncclUniqueId id{};
    if (mpi_.root()) check(api_.get_unique_id(&id), "ncclGetUniqueId");
    mpi_.broadcast(&id, sizeof id, 0);
    check(api_.comm_init_rank(&comm_, mpi_.size(), id, mpi_.rank()), "ncclCommInitRank");
    // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
    int v = 0;
    if (api_.get_version(&v) == ncclSuccess)
      version_ = v >= 10000 ? std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
                                  "." + std::to_string(v % 100)
                            : std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) +
                                  "." + std::to_string(v % 100);
  }
  ~NcclRing() override {
    if (!comm_) return;  // aborted
    try {
      comm_stream_->synchronize();
    } catch (...) {  // an earlier CUDA error: destroy the communicator all the same
    }
    api_.comm_destroy(comm_);
  }
  // A rank that fails: what is queued on the comm stream may wait for ranks that will never
  // join. Abort it, so that the streams (and the engine's shutdown) can finish.
  void abort() override {
    if (!comm_) return;
    api_.comm_abort(comm_);
    comm_ = nullptr;
  }
  void all_reduce(int tag, const std::vector<void*>& data, int64_t n, DType dtype,
                  bool average) override {
    CHECK(data.size() == 1, "NCCL: " << data.size() << " buffers in one process");
    if (n == 0) return;
    cudaStream_t s = comm_stream_->get();
    marked(tag).wait(s);
    check(api_.all_reduce(data[0], data[0], size_t(n), nccl_type(dtype), ncclSum, comm_, s),
          "ncclAllReduce");
    if (!average) return;
    const double scale = 1.0 / size();  // sum first, then 1/R, as the rings do
    switch (dtype) {
      case DType::f32: ring_scale_gpu(n, static_cast<float*>(data[0]), scale, s); break;
      case DType::f16: ring_scale_gpu(n, static_cast<half_t*>(data[0]), scale, s); break;
      default: ring_scale_gpu(n, static_cast<double*>(data[0]), scale, s); break;
    }
  }
  // OR of nonzero flags: the maximum, read as unsigned (any nonzero is above 0).
  void any(int tag, const std::vector<int32_t*>& flags, int64_t n) override {
    CHECK(flags.size() == 1, "NCCL: " << flags.size() << " flag sets in one process");
    if (n == 0) return;
    cudaStream_t s = comm_stream_->get();
    marked(tag).wait(s);
    check(api_.all_reduce(flags[0], flags[0], size_t(n), ncclUint32, ncclMax, comm_, s),
          "ncclAllReduce");
  }
  void wait(int) override {
    done_->record(comm_stream_->get());
    done_->wait(stream_);
  }
  std::string describe() const override {
    return std::to_string(size()) + " processes (mpirun), a GPU replica each, on NCCL " +
           version_ + " (a comm stream per process)";
  }
  // NCCL's asynchronous error (a peer that left, the network): polled by the engine while the
  // host waits for a step (Engine::await_records), which then aborts the communicator.
  std::string async_error() override {
    if (!comm_) return "";
    ncclResult_t state = ncclSuccess;
    if (api_.get_async_error(comm_, &state) != ncclSuccess) return "";
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return std::string("NCCL on rank ") + std::to_string(mpi_.rank()) + ": " +
           api_.error_string(state);
  }

 private:
  void check(ncclResult_t r, const char* what) const {
    CHECK(r == ncclSuccess, "NCCL: " << what << " failed on rank " << mpi_.rank() << ": "
                                     << api_.error_string(r));
  }
  const NcclApi& api_;
  std::unique_ptr<Stream> comm_stream_;
  std::unique_ptr<Event> done_;
  ncclComm_t comm_ = nullptr;
  std::string version_;
};

#endif

}  // namespace

namespace {
// This machine, as every process on it sees it, containers included: the kernel's boot id
// (else the host name).
std::string machine_id(const Mpi& mpi) {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f && std::getline(f, id) && !id.empty()) return id;
  return mpi.host();
}
}  // namespace

std::unique_ptr<Collective> make_mpi_gpu_collective(const Mpi& mpi, int device,
                                                    cudaStream_t stream) {
  // Every rank's GPU, whether every rank can load NCCL and whether any rank was told not to
  // use it (mpirun passes environment variables to other machines only when asked, -x): the
  // same facts on every rank, so the same choice.
  const std::vector<std::string> places =
      mpi.all_gather_text(machine_id(mpi) + "/" + gpu_bus_id(device));
  const char* env = std::getenv("CUTRAIN_NCCL");
  const bool off = mpi.sum(env && std::string(env) == "0" ? 1 : 0) > 0;
  std::string missing;
#if defined(CUTRAIN_CUDA) && defined(CUTRAIN_NCCL)
  const NcclApi* api = nccl_api(&missing);
#else
  missing = "this cutrain was built without NCCL (nccl.h was not found)";
#endif
  const int64_t without = mpi.sum(missing.empty() ? 0 : 1);
  if (missing.empty() && without > 0)
    missing = std::to_string(without) + " of " + std::to_string(mpi.size()) +
              " ranks could not load NCCL";
  const GpuTransport t = choose_gpu_transport(places, missing, off);
#if defined(CUTRAIN_CUDA) && defined(CUTRAIN_NCCL)
  if (t.nccl) return std::make_unique<NcclRing>(mpi, *api, device, stream);
#endif
  return std::make_unique<HostStagedRing>(mpi, device, stream, t.why);
}

}  // namespace cutrain
