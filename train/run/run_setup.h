// defines: the steps that set a training run up before its trainer exists (run.cpp's script
// calls them in this order): the run's folders locked, the checkpoint a --resume continues
// from, the device, the configuration completed from the data, and the --out folder with
// config.json.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/folder_lock.h"
#include "train/checkpoint/checkpoint.h"
#include "train/setup/config.h"
#include "train/setup/device.h"

namespace cutrain {

class Mpi;

// One writer per run folder (data/folder_lock.h): locks `dir` into `locks`, where the locks stay
// until the run ends, unless one there holds it already. `option` names it as the user did
// ("--out runs/r1"). `create`: make the folder first (an --out); else a folder that is not there
// is left for the next step to say so (a --resume). Rank 0 alone calls it under mpirun.
void lock_run_folder(const std::string& dir, const std::string& option, bool create,
                     std::vector<std::unique_ptr<FolderLock>>& locks);
// The folder of a --resume, which names a run folder or a checkpoint file in one.
std::string resume_folder(const std::string& resume);

// --resume: the newest checkpoint of cfg.resume, and cfg made the resumed run's (the options in
// `given` override the checkpoint's configuration).
Checkpoint load_resume_point(TrainConfig& cfg, const std::vector<std::string>& given, FILE* out);
// Where the run computes (--device, --devices; under mpirun the GPU of the local rank).
RunDevice choose_run_device(const TrainConfig& cfg, const Mpi* mpi);
// What is not given, worked out from the data; a run that cannot fit in memory is refused.
// Returns the notes that say what was worked out.
std::vector<std::string> resolve_run_config(TrainConfig& cfg, const RunDevice& device);
// The --out folder with OUT/config.json, and the configuration printed.
void save_config(const TrainConfig& cfg, bool resuming, const RunDevice& device,
                 const std::vector<std::string>& notes, FILE* out);

}  // namespace cutrain
