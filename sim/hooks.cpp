// The instrumentation's hooks: how a kernel's loads, stores and atomics reach the simulator's
// checks (access.cpp). The SIM build compiles the kernels' translation units with GCC's
// -fsanitize=thread and links no ThreadSanitizer runtime: every load and store of instrumented
// code calls __tsan_readN / __tsan_writeN, every atomic builtin becomes a call of
// __tsan_atomicN_op, and this file defines them all. (AddressSanitizer's hooks, used before,
// skip a store to a place the same block of code has just loaded from: `n++` reached the
// checks as a read alone, which is enough for bounds but hides the write a race is made of.)
// Host code in those translation units calls the hooks too: outside a simulated thread
// check_access returns at once, and the atomics are the host's either way.
#include <cstddef>
#include <cstdint>

#include "sim/block.h"

namespace {

using cutrain_sim::dev::check_access;

inline uintptr_t addr(const volatile void* p) { return reinterpret_cast<uintptr_t>(p); }

// An atomic's checks: a load reads, a store writes, an update (exchange, fetch-op,
// compare-exchange) reads what is there and writes it. Every memory order is taken as
// sequentially consistent (a stronger order than asked for is a valid one).
template <class T> void atomic_read(const volatile T* p, const void* at) {
  check_access(addr(p), sizeof(T), false, at, true);
}
template <class T> void atomic_write(volatile T* p, const void* at) {
  check_access(addr(p), sizeof(T), true, at, true);
}
template <class T> void atomic_update(volatile T* p, const void* at) {
  atomic_read(p, at);
  atomic_write(p, at);
}

}  // namespace

// __threadfence and __threadfence_block (sim/include/cutrain_sim_device.h).
void cutrain_sim::thread_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

extern "C" {

void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}

#define CUTRAIN_SIM_ACCESS(n)                                                              \
  void __tsan_read##n(void* p) {                                                           \
    check_access(addr(p), n, false, __builtin_return_address(0), false);                   \
  }                                                                                        \
  void __tsan_write##n(void* p) {                                                          \
    check_access(addr(p), n, true, __builtin_return_address(0), false);                    \
  }                                                                                        \
  void __tsan_unaligned_read##n(void* p) {                                                 \
    check_access(addr(p), n, false, __builtin_return_address(0), false);                   \
  }                                                                                        \
  void __tsan_unaligned_write##n(void* p) {                                                \
    check_access(addr(p), n, true, __builtin_return_address(0), false);                    \
  }                                                                                        \
  void __tsan_volatile_read##n(void* p) {                                                  \
    check_access(addr(p), n, false, __builtin_return_address(0), false);                   \
  }                                                                                        \
  void __tsan_volatile_write##n(void* p) {                                                 \
    check_access(addr(p), n, true, __builtin_return_address(0), false);                    \
  }
CUTRAIN_SIM_ACCESS(1)
CUTRAIN_SIM_ACCESS(2)
CUTRAIN_SIM_ACCESS(4)
CUTRAIN_SIM_ACCESS(8)
CUTRAIN_SIM_ACCESS(16)
#undef CUTRAIN_SIM_ACCESS

void __tsan_read_range(void* p, size_t n) {
  if (n) check_access(addr(p), n, false, __builtin_return_address(0), false);
}
void __tsan_write_range(void* p, size_t n) {
  if (n) check_access(addr(p), n, true, __builtin_return_address(0), false);
}
// A virtual call reads the object's vtable pointer; a constructor writes it.
void __tsan_vptr_read(void** p) {
  check_access(addr(p), sizeof(void*), false, __builtin_return_address(0), false);
}
void __tsan_vptr_update(void** p, void*) {
  check_access(addr(p), sizeof(void*), true, __builtin_return_address(0), false);
}

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// The atomics of each width, as ThreadSanitizer's interface names them.
#define CUTRAIN_SIM_FETCH(bits, T, op)                                                     \
  T __tsan_atomic##bits##_fetch_##op(volatile T* p, T v, int) {                            \
    atomic_update(p, __builtin_return_address(0));                                         \
    return __atomic_fetch_##op(p, v, __ATOMIC_SEQ_CST);                                    \
  }
#define CUTRAIN_SIM_ATOMICS(bits, T)                                                       \
  T __tsan_atomic##bits##_load(const volatile T* p, int) {                                 \
    atomic_read(p, __builtin_return_address(0));                                           \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                           \
  }                                                                                        \
  void __tsan_atomic##bits##_store(volatile T* p, T v, int) {                              \
    atomic_write(p, __builtin_return_address(0));                                          \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                              \
  }                                                                                        \
  T __tsan_atomic##bits##_exchange(volatile T* p, T v, int) {                              \
    atomic_write(p, __builtin_return_address(0));                                          \
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                    \
  }                                                                                        \
  CUTRAIN_SIM_FETCH(bits, T, add)                                                          \
  CUTRAIN_SIM_FETCH(bits, T, sub)                                                          \
  CUTRAIN_SIM_FETCH(bits, T, and)                                                          \
  CUTRAIN_SIM_FETCH(bits, T, or)                                                           \
  CUTRAIN_SIM_FETCH(bits, T, xor)                                                          \
  CUTRAIN_SIM_FETCH(bits, T, nand)                                                         \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* p, T* expected, T v, int,  \
                                                    int) {                                 \
    atomic_update(p, __builtin_return_address(0));                                         \
    return __atomic_compare_exchange_n(p, expected, v, false, __ATOMIC_SEQ_CST,            \
                                       __ATOMIC_SEQ_CST);                                  \
  }                                                                                        \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* p, T* expected, T v, int,    \
                                                  int) {                                   \
    atomic_update(p, __builtin_return_address(0));                                         \
    return __atomic_compare_exchange_n(p, expected, v, false, __ATOMIC_SEQ_CST,            \
                                       __ATOMIC_SEQ_CST);                                  \
  }                                                                                        \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* p, T expected, T v, int, int) { \
    atomic_update(p, __builtin_return_address(0));                                         \
    __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST,                  \
                                __ATOMIC_SEQ_CST);                                         \
    return expected;                                                                       \
  }
CUTRAIN_SIM_ATOMICS(8, char)
CUTRAIN_SIM_ATOMICS(16, short)
CUTRAIN_SIM_ATOMICS(32, int)
CUTRAIN_SIM_ATOMICS(64, long)
#undef CUTRAIN_SIM_ATOMICS
#undef CUTRAIN_SIM_FETCH

}  // extern "C"
