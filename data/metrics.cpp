#include "data/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/check.h"

namespace cutrain {

RateMeter::RateMeter(int64_t first_step, int64_t total_steps, Clock::time_point start)
    : first_step_(first_step), total_steps_(total_steps), start_(start), last_(start) {}

RateMeter::Rates RateMeter::update(int64_t step, int64_t images, double data_wait_s,
                                   double sync_s, Clock::time_point now) {
  const double window = std::chrono::duration<double>(now - last_).count();
  Rates r;
  r.elapsed_s = std::chrono::duration<double>(now - start_).count();
  if (window > 0) {
    r.images_per_s = double(images - last_images_) / window;
    r.data_wait_pct = 100.0 * (data_wait_s - last_wait_s_) / window;
    r.sync_pct = 100.0 * (sync_s - last_sync_s_) / window;
  }
  const int64_t done = step - first_step_;
  r.eta_s = done > 0 ? double(total_steps_ - step) * r.elapsed_s / double(done)
                     : std::numeric_limits<double>::quiet_NaN();
  last_ = now;
  last_images_ = images;
  last_wait_s_ = data_wait_s;
  last_sync_s_ = sync_s;
  return r;
}

MetricsWriter::MetricsWriter(const std::string& path, Mode mode) : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
                    (mode == Mode::truncate ? O_TRUNC : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  USER_CHECK(fd_ >= 0, "cannot write the metrics file " << path << ": " << std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  // One write() is one append with O_APPEND; the loop only matters if the OS takes part of it
  // (a full disk, a signal), and then it reports rather than leaving a silent half line.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    USER_CHECK(n > 0, "cannot write the metrics file " << path_ << ": " << std::strerror(errno));
    done += size_t(n);
  }
  lines_++;
}

Bound run_bound(const DeviceTime& t) {
  const double wall = t.wall_s();
  if (!(wall > 0)) return Bound::unknown;
  if (100 * t.wait_s > kBoundPct * wall) return Bound::loader;
  if (100 * t.idle_s > kBoundPct * wall) return Bound::host;
  if (t.launch_s > 0 && 100 * t.launch_s >= kLaunchBoundPct * t.compute_s) return Bound::host;
  return Bound::compute;
}

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::loader: return "loader";
    case Bound::host: return "host";
    case Bound::compute: return "compute";
    case Bound::unknown: break;
  }
  return "";
}

double pipeline_ratio(double wall_s, double loader_alone_s, double compute_s) {
  const double longer = std::max(loader_alone_s, compute_s);
  return longer > 0 ? wall_s / longer : std::numeric_limits<double>::quiet_NaN();
}

void MetricsWriter::write(const StepMetrics& m) {
  // Field by field in a fixed order (nlohmann::ordered_json), so the file reads the same way
  // on every line; doubles print with the fewest digits that read back exactly.
  nlohmann::ordered_json j;
  j["kind"] = "step";
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = m.loss;
  j["accuracy"] = m.accuracy;
  j["lr"] = m.lr;
  j["loss_scale"] = m.loss_scale;
  j["images_per_s"] = m.images_per_s;
  j["data_wait_pct"] = m.data_wait_pct;
  j["data_wait_held_pct"] = m.data_wait_held_pct;
  // The device's clock: null when it measured nothing in the window.
  auto known = [](double v) -> nlohmann::ordered_json {
    return v >= 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
  };
  j["busy_pct"] = known(m.busy_pct);
  j["device_wait_pct"] = known(m.device_wait_pct);
  j["idle_pct"] = known(m.idle_pct);
  j["launch_pct"] = known(m.launch_pct);
  j["bound"] = m.bound == Bound::unknown ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(bound_name(m.bound));
  j["pipeline_ratio"] = known(m.pipeline_ratio);
  j["loader_pct"] = known(m.loader_pct);
  if (m.sync_bn_pct >= 0) j["sync_bn_pct"] = m.sync_bn_pct;
  j["time"] = m.time_s;
  write_line(j.dump() + "\n");  // NaN and Infinity dump as null
}

void MetricsWriter::write(const std::string& kind, const nlohmann::json& fields) {
  CHECK(fields.is_object(), "metrics record '" << kind << "': the fields must be a JSON object");
  nlohmann::ordered_json j;
  j["kind"] = kind;
  for (const auto& kv : fields.items()) j[kv.key()] = kv.value();
  write_line(j.dump() + "\n");
}

int64_t MetricsWriter::lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

}  // namespace cutrain
