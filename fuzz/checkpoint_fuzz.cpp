// Fuzz target: HDF5 checkpoints (train/checkpoint/checkpoint.h), as `--resume`, `cutrain eval` and
// `cutrain predict` read them: read_checkpoint (the validated open, every attribute, the
// scalars, every tensor's type and shape checked before its allocation, the checksum), then,
// for a checkpoint that verifies, its configuration (config_from_json_text, validate_config).
//
// Any change to a real checkpoint's tensors or metadata fails the checksum, so what this
// target reaches is everything before that verdict; the configuration text behind it has a
// target of its own (checkpoint_config_fuzz.cpp), since a checksum is no defence against a
// file made on purpose. As for packs, no HDF5 object may be left open after an input, inputs
// that walk into known bugs of libhdf5 1.10's global heap reader are left out
// (fuzz/hdf5_guard.h), and what fails inside libhdf5 is set aside by fuzz/run.sh
// (fuzz/libhdf5/checkpoint/ keeps such files).
#include <hdf5.h>

#include "data/hdf5_handle.h"
#include "fuzz/feed.h"
#include "fuzz/hdf5_guard.h"
#include "train/checkpoint/checkpoint.h"
#include "train/setup/config.h"

namespace cutrain_fuzz {

Outcome feed_checkpoint(const uint8_t* data, size_t size) {
  if (!libhdf5_heap_trap(data, size).empty()) return Outcome::refused;
  const std::string path = scratch_file("checkpoint.h5", data, size);
  const Outcome o = refuse_errors([&] {
    const cutrain::Checkpoint c = cutrain::read_checkpoint(path);
    for (const auto& [name, t] : c.tensors)
      fuzz_require(t.defined() && t.device() == cutrain::Device::cpu,
                   "tensor '" + name + "' is read to the CPU");
    cutrain::TrainConfig cfg = cutrain::config_from_json_text(c.config_json, path);
    cutrain::resolve_defaults(cfg);
    cutrain::validate_config(cfg);
  });
  cutrain::H5Lock lock;
  fuzz_require(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0,
               "every HDF5 object opened for the input is closed");
  return o;
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_checkpoint)
