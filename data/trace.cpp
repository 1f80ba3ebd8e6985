#include "data/trace.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#if defined(CUTRAIN_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>  // header-only NVTX v3: nothing to link
#include <sys/syscall.h>
#define CUTRAIN_NVTX 1
#endif

namespace cutrain {

namespace detail {
#ifdef CUTRAIN_NVTX
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }
#else
void nvtx_push(const char*) {}
void nvtx_pop() {}
#endif
}  // namespace detail

Tracer::Tracer(size_t max_events) : origin_(Clock::now()), max_events_(max_events) {}

int Tracer::thread_track_locked() {
  auto it = thread_tid_.find(std::this_thread::get_id());
  if (it != thread_tid_.end()) return it->second;
  row_names_.emplace_back();
  const int tid = int(row_names_.size());  // tids start at 1
  thread_tid_.emplace(std::this_thread::get_id(), tid);
  return tid;
}

int Tracer::this_thread_track() {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_track_locked();
}

void Tracer::name_thread(const std::string& name) {
#ifdef CUTRAIN_NVTX
  nvtxNameOsThreadA(uint32_t(syscall(SYS_gettid)), name.c_str());
#endif
  std::lock_guard<std::mutex> lock(mu_);
  int tid = thread_track_locked();
  if (!row_names_[size_t(tid - 1)].empty() && row_names_[size_t(tid - 1)] != name) {
    row_names_.emplace_back();  // a new row for the new name
    tid = int(row_names_.size());
    thread_tid_[std::this_thread::get_id()] = tid;
  }
  row_names_[size_t(tid - 1)] = name;
}

int Tracer::track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = named_track_.find(name);
  if (it != named_track_.end()) return it->second;
  row_names_.push_back(name);
  const int tid = int(row_names_.size());
  named_track_.emplace(name, tid);
  return tid;
}

void Tracer::add_locked(int tid, std::string&& name, const char* cat, Clock::time_point begin,
                        Clock::time_point end, Arg a0, Arg a1) {
  if (count_ >= max_events_) {
    dropped_++;
    return;
  }
  if (count_ == chunks_.size() * kChunk) chunks_.emplace_back(new Event[kChunk]);
  Event& e = chunks_.back()[count_ % kChunk];
  e.name = std::move(name);
  e.cat = cat;
  e.ts_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(begin - origin_).count();
  e.dur_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count();
  e.tid = tid;
  e.a0 = a0;
  e.a1 = a1;
  count_++;
}

void Tracer::complete(int track, std::string name, const char* cat, Clock::time_point begin,
                      Clock::time_point end, Arg a0, Arg a1) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  add_locked(track, std::move(name), cat, begin, end, a0, a1);
}

void Tracer::complete(std::string name, const char* cat, Clock::time_point begin,
                      Clock::time_point end, Arg a0, Arg a1) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  add_locked(thread_track_locked(), std::move(name), cat, begin, end, a0, a1);
}

size_t Tracer::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

size_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

namespace {
// A JSON string literal: quotes, backslashes and control characters escaped.
void put_string(FILE* f, const char* s) {
  std::fputc('"', f);
  for (; *s; s++) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      std::fputc('\\', f);
      std::fputc(c, f);
    } else if (c < 0x20) {
      std::fprintf(f, "\\u%04x", c);
    } else {
      std::fputc(c, f);
    }
  }
  std::fputc('"', f);
}

// Nanoseconds as microseconds with three decimals, exactly ("1234.567"): no floating point.
void put_us(FILE* f, int64_t ns) {
  if (ns < 0) {  // cannot happen with a steady clock; kept honest rather than clamped
    std::fputc('-', f);
    ns = -ns;
  }
  std::fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}
}  // namespace

bool Tracer::write(const std::string& path, std::string* why) const noexcept {
  try {
    // Under the lock: which events exist, and the row names. Events below `n` never change.
    std::vector<const Event*> chunks;
    std::vector<std::string> names;
    size_t n = 0, dropped = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& c : chunks_) chunks.push_back(c.get());
      names = row_names_;
      n = count_;
      dropped = dropped_;
    }
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) {
      if (why) *why = "cannot write " + tmp + ": " + std::strerror(errno);
      return false;
    }
    std::fputs("{\"traceEvents\":[\n", f);
    std::fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
               "\"args\":{\"name\":\"cutrain\"}}", f);
    for (size_t i = 0; i < names.size(); i++) {
      const std::string row = names[i].empty() ? "thread " + std::to_string(i + 1) : names[i];
      std::fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%zu,"
                      "\"args\":{\"name\":", i + 1);
      put_string(f, row.c_str());
      // rows in the order they appeared (main first when it names itself first)
      std::fprintf(f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%zu,"
                      "\"args\":{\"sort_index\":%zu}}", i + 1, i + 1);
    }
    for (size_t i = 0; i < n; i++) {
      const Event& e = chunks[i / kChunk][i % kChunk];
      std::fputs(",\n{\"name\":", f);
      put_string(f, e.name.c_str());
      std::fputs(",\"cat\":", f);
      put_string(f, e.cat);
      std::fputs(",\"ph\":\"X\",\"ts\":", f);
      put_us(f, e.ts_ns);
      std::fputs(",\"dur\":", f);
      put_us(f, e.dur_ns);
      std::fprintf(f, ",\"pid\":1,\"tid\":%d", e.tid);
      if (e.a0.key) {
        std::fputs(",\"args\":{", f);
        put_string(f, e.a0.key);
        std::fprintf(f, ":%lld", (long long)e.a0.value);
        if (e.a1.key) {
          std::fputc(',', f);
          put_string(f, e.a1.key);
          std::fprintf(f, ":%lld", (long long)e.a1.value);
        }
        std::fputc('}', f);
      }
      std::fputc('}', f);
    }
    std::fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%zu}}\n",
                 dropped);
    const bool ok = std::ferror(f) == 0;
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) {
      if (why) *why = "cannot write " + tmp + ": " + std::strerror(ok ? errno : err);
      std::remove(tmp.c_str());
      return false;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      if (why) *why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
      std::remove(tmp.c_str());
      return false;
    }
    return true;
  } catch (const std::exception& e) {  // out of memory while copying the row names
    if (why) *why = std::string("cannot write the trace: ") + e.what();
    return false;
  }
}

}  // namespace cutrain
