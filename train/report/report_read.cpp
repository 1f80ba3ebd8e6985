// The run report's input: the metrics records parsed by the rules of report.h, the per-epoch
// training means, and what the run folder holds (config.json, checkpoints, bad-file lists,
// the trace); write_report, which puts the page in place.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/atomic_file.h"
#include "data/units.h"
#include "kernels/check.h"
#include "train/report/report.h"

namespace cutrain {

namespace fs = std::filesystem;

namespace {

// A number of a record; NaN for null (a non-finite value written by the run) or absent.
double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
int64_t integer(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}
std::string text(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

MetricsEval eval_record(const nlohmann::json& j) {
  MetricsEval e;
  e.epoch = int(integer(j, "epoch")), e.step = integer(j, "step");
  e.loss = number(j, "loss"), e.top1 = number(j, "top1"), e.top5 = number(j, "top5");
  e.time = number(j, "time"), e.images = integer(j, "images");
  e.bad_files = integer(j, "bad_files");
  e.ema_loss = number(j, "ema_loss"), e.ema_top1 = number(j, "ema_top1");
  e.ema_top5 = number(j, "ema_top5");
  if (j.contains("per_class") && j["per_class"].is_array())
    for (const auto& c : j["per_class"])
      if (c.is_object())
        e.per_class.push_back({text(c, "class"), integer(c, "images"), number(c, "top1")});
  const size_t K = e.per_class.size();
  if (j.contains("confusion") && j["confusion"].is_array() && j["confusion"].size() == K) {
    for (const auto& row : j["confusion"]) {
      if (!row.is_array() || row.size() != K) break;
      for (const auto& n : row) e.confusion.push_back(n.is_number() ? n.get<int64_t>() : 0);
    }
    if (e.confusion.size() != K * K) e.confusion.clear();  // a malformed matrix: not drawn
  }
  return e;
}

template <typename Map> void erase_after(Map& m, int64_t step) {
  for (auto it = m.begin(); it != m.end();)
    it = it->second.step > step ? m.erase(it) : std::next(it);
}

// "runs/r1/a b#.h5" relative to `from`, as a URL path: "a%20b%23.h5".
std::string relative_href(const fs::path& file, const fs::path& from) {
  std::error_code ec;
  const fs::path rel = fs::relative(fs::absolute(file), fs::absolute(from), ec);
  const std::string p = (ec || rel.empty() ? fs::absolute(file) : rel).generic_string();
  std::string out;
  for (unsigned char ch : p) {
    if (std::isalnum(ch) || std::string("-._~/").find(char(ch)) != std::string::npos) {
      out += char(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

// config.json's value as table text: strings as they are, arrays joined by ", ".
std::string value_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + value_text(e);
    return s;
  }
  return v.dump();
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

RunRecords parse_metrics(const std::string& jsonl) {
  RunRecords r;
  std::map<int64_t, MetricsStep> steps;
  std::map<int, MetricsEval> evals;
  std::map<int64_t, MetricsSkip> skips;
  double process_time = 0;  // the current process's last "time"
  auto new_process = [&] { r.wall_s += process_time, process_time = 0; };
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
      r.unreadable++;
      continue;
    }
    r.lines++;
    const std::string kind = j["kind"];
    const double time = number(j, "time");
    if (kind == "start") {
      new_process();
      MetricsStart s{integer(j, "step"), integer(j, "total_steps"), integer(j, "steps_per_epoch"),
                    int(integer(j, "epochs")), text(j, "device")};
      erase_after(steps, s.step), erase_after(evals, s.step), erase_after(skips, s.step);
      r.starts.push_back(s);
      continue;
    }
    if (std::isfinite(time)) {
      if (time < process_time && r.starts.empty()) new_process();  // an older file's resume
      process_time = std::max(process_time, time);
    }
    if (kind == "step") {
      MetricsStep s;
      s.step = integer(j, "step"), s.epoch = int(integer(j, "epoch"));
      s.loss = number(j, "loss"), s.accuracy = number(j, "accuracy"), s.lr = number(j, "lr");
      s.loss_scale = number(j, "loss_scale"), s.images_per_s = number(j, "images_per_s");
      s.data_wait_pct = number(j, "data_wait_pct"), s.time = time;
      s.busy_pct = number(j, "busy_pct"), s.device_wait_pct = number(j, "device_wait_pct");
      s.idle_pct = number(j, "idle_pct"), s.pipeline_ratio = number(j, "pipeline_ratio");
      steps[s.step] = s;
    } else if (kind == "eval") {
      MetricsEval e = eval_record(j);
      evals[e.epoch] = std::move(e);
    } else if (kind == "skip") {
      const int64_t step = integer(j, "step");
      skips[step] = {step, text(j, "parameter"), number(j, "loss_scale")};
    }  // "checkpoint" and kinds of later versions: not drawn
  }
  new_process();
  for (auto& [k, v] : steps) r.steps.push_back(v);
  for (auto& [k, v] : evals) r.evals.push_back(std::move(v));
  for (auto& [k, v] : skips) r.skips.push_back(v);
  return r;
}

std::vector<EpochTrain> train_epochs(const RunRecords& r) {
  std::vector<EpochTrain> out;
  double loss = 0, loss_w = 0, acc = 0, acc_w = 0;
  int64_t prev = 0;  // the step of the previous record: a record covers the steps since
  for (size_t i = 0; i < r.steps.size(); i++) {
    const MetricsStep& s = r.steps[i];
    const double w = double(std::max<int64_t>(1, s.step - prev));
    prev = s.step;
    if (std::isfinite(s.loss)) loss += w * s.loss, loss_w += w;
    if (std::isfinite(s.accuracy)) acc += w * s.accuracy, acc_w += w;
    if (i + 1 == r.steps.size() || r.steps[i + 1].epoch != s.epoch) {
      out.push_back({s.epoch, s.step, loss_w > 0 ? loss / loss_w : NAN,
                     acc_w > 0 ? acc / acc_w : NAN});
      loss = loss_w = acc = acc_w = 0;
    }
  }
  return out;
}

ReportInput read_report_input(const std::string& run_dir, const std::string& report_path) {
  std::error_code ec;
  USER_CHECK(fs::is_directory(run_dir, ec),
             "cutrain report: " << run_dir << " is not a run folder (the --out of cutrain train)");
  const fs::path dir(run_dir), config_path = dir / "config.json";
  USER_CHECK(fs::exists(config_path, ec), "cutrain report: " << run_dir << " has no config.json: "
                                              "not the --out folder of a cutrain train run");
  ReportInput in;
  const fs::path whole = fs::absolute(dir).lexically_normal();  // "runs/r1/" ends in ""
  in.title = (whole.has_filename() ? whole : whole.parent_path()).filename().string();
  const fs::path from = fs::absolute(report_path).parent_path();

  const nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(read_file(config_path), nullptr, false);
  USER_CHECK(config.is_object(),
             "cutrain report: " << config_path.string() << " is not a JSON object");
  for (const auto& [key, value] : config.items()) in.config.emplace_back(key, value_text(value));
  if (config.contains("class_names") && config["class_names"].is_array())
    for (const auto& n : config["class_names"]) in.class_names.push_back(value_text(n));

  // The records, from where the run wrote them.
  const std::string given = config.contains("metrics") && config["metrics"].is_string()
                                ? config["metrics"].get<std::string>() : "";
  const fs::path metrics = given.empty() ? dir / "metrics.jsonl" : fs::path(given);
  USER_CHECK(fs::exists(metrics, ec), "cutrain report: no metrics file " << metrics.string()
                                          << ": the run writes it from its first steps on");
  in.records = parse_metrics(read_file(metrics));
  USER_CHECK(in.records.lines > 0, "cutrain report: no metrics records yet in "
                                       << metrics.string() << " (the run writes one every "
                                       << "--log-every steps)");
  in.metrics_name = metrics.filename().string();

  // The checkpoints by step, then best.h5 (a hard link to one of them: say which).
  std::vector<fs::path> h5;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".h5" && e.path().filename() != "best.h5" && e.is_regular_file(ec))
      h5.push_back(e.path());
  std::sort(h5.begin(), h5.end());  // step-%08lld.h5: by name is by step
  const fs::path best = dir / "best.h5";
  std::string best_of;
  for (const fs::path& p : h5)
    if (fs::exists(best, ec) && fs::equivalent(p, best, ec)) best_of = p.filename().string();
  auto size_of = [&](const fs::path& p) {
    const uintmax_t n = fs::file_size(p, ec);
    return ec ? std::string("?") : bytes_str(int64_t(n));
  };
  for (const fs::path& p : h5)
    in.checkpoints.push_back({p.filename().string(), relative_href(p, from),
                              size_of(p) + (p.filename() == best_of ? ", the best" : "")});
  if (fs::exists(best, ec))
    in.checkpoints.push_back({"best.h5", relative_href(best, from),
                              size_of(best) + ", the best validation top-1" +
                                  (best_of.empty() ? "" : ": " + best_of)});

  // The metrics, the configuration and the trace(s): under mpirun one file per rank.
  in.files.push_back({metrics.filename().string(), relative_href(metrics, from), "the records"});
  in.files.push_back({"config.json", relative_href(config_path, from), "the configuration"});
  const std::string trace = config.contains("trace") && config["trace"].is_string()
                                ? config["trace"].get<std::string>() : "";
  if (!trace.empty()) {
    const fs::path t(trace);
    std::vector<fs::path> found;
    if (fs::exists(t, ec)) found.push_back(t);
    const fs::path folder = t.parent_path().empty() ? fs::path(".") : t.parent_path();
    const std::string rank_prefix = t.stem().string() + ".rank";
    for (const fs::directory_entry& e : fs::directory_iterator(folder, ec))
      if (e.path().filename().string().rfind(rank_prefix, 0) == 0 &&
          e.path().extension() == t.extension())
        found.push_back(e.path());
    std::sort(found.begin(), found.end());
    for (const fs::path& f : found)
      in.files.push_back({f.filename().string(), relative_href(f, from),
                          "the trace (ui.perfetto.dev or chrome://tracing)"});
    if (found.empty())
      in.files.push_back({t.filename().string(), "", "the trace: written at the end of the run"});
  }

  // The training data's bad files: every replica's list, each path once.
  std::set<std::string> seen;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool replica = name.rfind("bad_files.replica", 0) == 0 && e.path().extension() == ".txt";
    if (name != "bad_files.txt" && !replica) continue;
    std::istringstream lines(read_file(e.path()));
    for (std::string line; std::getline(lines, line);) {
      BadFileLine b;
      std::istringstream fields(line);
      std::getline(fields, b.path, '\t'), std::getline(fields, b.kind, '\t');
      std::getline(fields, b.message);
      if (!b.path.empty() && seen.insert(b.path).second) in.bad_files.push_back(b);
    }
  }

  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);  // not std::localtime: the checkpoint writer's thread calls this
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &local);
  in.generated = when;
  return in;
}

std::string write_report(const std::string& run_dir, const std::string& out) {
  const std::string path = out.empty() ? (fs::path(run_dir) / "report.html").string() : out;
  write_file_atomically(path, report_html(read_report_input(run_dir, path)));
  return path;
}

}  // namespace cutrain
