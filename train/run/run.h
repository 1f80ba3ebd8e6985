// defines: run_training, the whole of `cutrain train`: the epoch loop around Trainer::step,
// with evaluation and a checkpoint after each epoch, --resume, and the clean stop on
// SIGINT/SIGTERM. RunSummary, what it reports back (for the command and for tests).
//
//   resolve the configuration (or take the checkpoint's, for --resume)
//   print it and save it as OUT/config.json
//   for each step until epochs x steps-per-epoch:
//     Trainer::step()                     (train/engine/trainer.h)
//     progress line every --log-every steps; a skipped step is reported with its parameter
//     at the end of an epoch: evaluate on --val, checkpoint (best by validation top-1)
//     every --checkpoint-every steps: checkpoint
//     on SIGINT/SIGTERM: checkpoint, wait for it to be on disk, exit 128 + signal
//   the final report: validation metrics with per-class accuracy and class names
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "train/engine/evaluate.h"
#include "train/setup/config.h"

namespace cutrain {

class Mpi;

struct RunSummary {
  int exit_code = 0;            // 0 finished; 128 + signal when stopped by one
  int64_t first_step = 0;       // where this process started (> 0 after --resume)
  int64_t steps = 0;            // steps done at the end, counting those before a resume
  std::vector<double> losses;   // the loss of every step this process ran, in order
  int64_t graph_steps = 0;      // of them, replayed from the CUDA graph (--cuda-graph)
  EvalResult final_eval;        // the last evaluation (images == 0: none)
  EvalResult final_average_eval;  // --ema: the last evaluation of the weights' average
  std::string last_checkpoint;  // the newest checkpoint file written
  double train_seconds = 0;     // in training steps, this process
  double seconds = 0;           // the whole run, this process
  int64_t bad_files = 0;        // distinct bad files skipped, found by any rank
  TrainConfig config;           // the resolved configuration
};

// `given`: the keys of the options given on the command line (option_key), which a resumed
// run takes from `cfg` instead of the checkpoint (train/setup/config.h: resume_config).
// Progress and reports go to `out` (stdout) and stderr; errors are thrown as cutrain::Error.
// allow_data_change (--allow-data-change, with --resume): training data that differ from the
// checkpoint's are taken, and the run goes on from the next epoch (Trainer::
// restore_at_next_epoch) instead of being refused. It is not part of the configuration: the
// next resume of the run checks its data again.
// mpi: a run that mpirun started (train/replicas/mpi.h): every rank calls run_training, each
// one replica; rank 0 alone prints, evaluates and writes the configuration, the metrics and
// the checkpoints. Null: one process.
RunSummary run_training(TrainConfig cfg, const std::vector<std::string>& given = {},
                        FILE* out = stdout, bool allow_data_change = false,
                        const Mpi* mpi = nullptr);

}  // namespace cutrain
