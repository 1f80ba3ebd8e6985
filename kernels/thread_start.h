// defines: start_thread, std::thread's constructor with its failure turned into a message.
//
// std::thread throws std::system_error when the system refuses a thread (its limit of threads
// or processes, or no memory for the stack: EAGAIN). Left alone that is "Resource temporarily
// unavailable" with no word of which thread or what to do, and a pool half started then
// destroyed while joinable ends in std::terminate. start_thread names the thread and throws
// UserError; a pool that starts several (data/loader.cpp, train/replicas/replica_threads.cpp)
// stops and joins the ones already running before it rethrows.
#pragma once
#include <system_error>
#include <thread>
#include <utility>

#include "kernels/check.h"

namespace cutrain {

// std::thread(f), or UserError("cannot start <what>: <reason> ...").
template <typename F>
std::thread start_thread(const std::string& what, F&& f) {
  try {
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {
    throw UserError("cannot start " + what + ": " + e.code().message() +
                    " (the system's limit of threads, or no memory for another one: lower "
                    "--threads)");
  }
}

}  // namespace cutrain
