#include "train/run/signals.h"

#include <unistd.h>

#include <cstring>

#include "kernels/check.h"

namespace cutrain {

namespace {

volatile sig_atomic_t g_received = 0;
volatile sig_atomic_t g_installed = 0;

void say(const char* msg) {
  ssize_t ignored = ::write(STDERR_FILENO, msg, std::strlen(msg));
  (void)ignored;
}

// Only async-signal-safe calls in here: write, _exit, and a store to a sig_atomic_t.
void on_signal(int sig) {
  if (g_received != 0) {
    say("\ncutrain: second signal: exiting now, without a final checkpoint\n");
    ::_exit(128 + sig);
  }
  g_received = sig;
  say("\ncutrain: stopping after this step to save a checkpoint (signal again to quit at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  CHECK(!g_installed, "StopSignals: already installed (one at a time)");
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  g_received = 0;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  g_installed = 1;
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_installed = 0;
}

int StopSignals::received() const { return g_received; }

const char* StopSignals::name() const {
  switch (g_received) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "";
  }
}

}  // namespace cutrain
