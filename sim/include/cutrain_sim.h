// The simulator's own controls, for its tests (sim/tests/) and anyone debugging under it: what
// the last kernel failure said, clearing a device's sticky error so that a test process can go
// on after a deliberate failure, and holding a stream back so that a missing event wait shows.
// Only the SIM build has this header (sim/include/ is on the include path in SIM builds only).
#pragma once
#include <string>

#include "cuda_runtime.h"

namespace cutrain_sim {

// The report of the last failure the simulator detected ("" if none): which check, in which
// kernel, block and thread. It is also printed on stderr when it happens.
std::string last_report();
// Clears every device's sticky error and the last report (a real GPU needs a new process).
void reset_errors();
// Holds `stream` back: it runs nothing until someone waits for it (a synchronize or query of
// it, of the device or of an event recorded on it, or another stream's event wait), so work
// of another stream that forgot to wait for it runs first. nullptr releases the hold.
// CUTRAIN_SIM_HOLD_STREAM=n holds the n-th stream created (from 1).
void hold_stream(cudaStream_t stream);
// The seed of the thread and block orders (CUTRAIN_SIM_SEED, default 1).
void set_seed(unsigned long long seed);
// The chance (0 to 1) that a thread makes way for the others of its block before each memory
// access, so that orders inside a barrier phase are tried (CUTRAIN_SIM_INTERLEAVE, default 0:
// a thread runs until it must meet the others). Seeded: the same seed, the same order.
void set_interleave(double chance);

// Stopping at one simulated thread in a debugger (docs/simulator.md). With
// CUTRAIN_SIM_BREAK=[KERNEL:]BLOCK,THREAD (linear indices: blockIdx.x + gridDim.x * (blockIdx.y
// + gridDim.y * blockIdx.z), the same for the thread; KERNEL a part of the kernel's name), that
// thread calls cutrain_sim_break() just before it runs the kernel's body, in every launch that
// matches: `break cutrain_sim_break` in gdb, then `finish` and `step` into the kernel.
// set_break() sets the same from code ("" turns it off); break_count() counts the calls made.
void set_break(const std::string& spec);
long break_count();

}  // namespace cutrain_sim

// Where CUTRAIN_SIM_BREAK's thread stops: a function that does nothing, for a breakpoint.
extern "C" void cutrain_sim_break(const char* kernel, unsigned block, unsigned thread);
