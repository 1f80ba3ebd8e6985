// The run report's page: report_html, from a ReportInput to one self-contained HTML file. The
// order on the page: the header (what ran, and how it went, in six numbers), the charts and
// the last evaluation per class (report_charts.cpp), the per-epoch table, skipped steps, bad
// files, files, the configuration. The CSS is here; the drawings are report_svg.h's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "data/metrics.h"
#include "train/report/report.h"
#include "train/report/report_page.h"
#include "train/report/report_svg.h"

namespace cutrain {

namespace report_page {

std::string fmt(const char* format, double v) {
  return std::isfinite(v) ? printf_str(format, v) : "&ndash;";
}

std::string duration(double s) {
  char buf[48];
  if (!std::isfinite(s) || s < 0) return "&ndash;";
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%d h %02d min", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%d min %02d s", int(s / 60), int(std::fmod(s, 60)));
  else
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string legend_item(const char* color, const std::string& name, bool dashed) {
  return std::string("<i") + (dashed ? " class=\"d\"" : "") + " style=\"color:" + color +
         "\"></i>" + html_escape(name);
}

std::string figure(const std::string& title, const std::string& legend, const std::string& svg,
                   const std::string& note) {
  return "<figure><figcaption><b>" + title + "</b><span class=\"legend\">" + legend +
         "</span></figcaption>" + svg + (note.empty() ? "" : "<p class=\"note\">" + note + "</p>") +
         "</figure>\n";
}

}  // namespace report_page

namespace {

using namespace report_page;

const char* kStyle = R"(
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f6f8fb;--card:#fff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:22px 20px 36px}
.eyebrow{font-size:11px;letter-spacing:.09em;text-transform:uppercase;color:var(--muted)}
h1{font-size:24px;margin:2px 0 4px;font-weight:650}
h2{font-size:16px;margin:26px 0 10px;font-weight:650}
.meta{color:var(--muted);margin:0 0 14px}.meta b{color:var(--fg);font-weight:600}
.kpis{display:grid;grid-template-columns:repeat(6,1fr);gap:10px}
.kpi,.card,figure{background:var(--card);border:1px solid var(--line);border-radius:10px}
.kpi{padding:10px 14px}
.kpi .k{font-size:12px;color:var(--muted)}
.kpi .v{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums;white-space:nowrap}
.kpi .s{font-size:12px;color:var(--muted)}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:14px;align-items:start}
figure{margin:0;padding:10px 14px 4px}
figcaption{display:flex;justify-content:space-between;align-items:baseline;gap:6px;flex-wrap:wrap}
figcaption b{font-size:14px}
.legend{font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:16px;height:0;border-top:3px solid;margin:0 4px 3px 10px;
 vertical-align:middle}
.legend i.d{border-top-style:dashed}
.note{font-size:12px;color:var(--muted);margin:2px 0 6px}
.card{padding:12px 14px}
svg.chart{display:block;font-family:inherit;max-width:100%;height:auto}svg.heat{margin:0 auto}
svg .grid{stroke:#edf1f6}svg .ax{stroke:#94a3b8;fill:none}
svg .tick{font-size:11px;fill:#64748b}svg .lbl{font-size:12px;fill:#475569}
svg .hover{fill-opacity:0;stroke:none}svg .hover:hover{fill-opacity:1}
svg .name{font-size:12px;fill:#334155}svg .val{font-size:11px;fill:#475569}
svg .count{font-size:11px;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
td,th{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px}
.n{text-align:right}
.cfg{display:grid;grid-template-columns:1fr 1fr;gap:0 24px;align-items:start}
.card p{margin:0 0 6px}.muted{color:var(--muted)}
.cfg td:first-child{color:var(--muted);white-space:nowrap;width:1%}
pre,code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{margin:0;white-space:pre-wrap}
.best{display:inline-block;font-size:11px;padding:0 7px;border-radius:9px;background:#dcfce7;
 color:#166534;margin-left:6px}
a{color:#1d4ed8;text-decoration:none}a:hover{text-decoration:underline}
footer{margin-top:28px;color:var(--muted);font-size:12px}
)";

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string config_value(const ReportInput& in, const std::string& key) {
  for (const auto& [k, v] : in.config)
    if (k == key) return v;
  return "";
}

std::string header(const ReportInput& in, const std::vector<EpochTrain>& epochs) {
  const RunRecords& r = in.records;
  const bool val = !r.evals.empty();
  // Epochs done: whole epochs of the last step (the start records know the epoch's length).
  const int total = std::atoi(config_value(in, "epochs").c_str());
  const int64_t last = r.steps.empty() ? 0 : r.steps.back().step;
  int done = val ? r.evals.back().epoch : 0;
  if (!r.starts.empty() && r.starts.back().steps_per_epoch > 0)
    done = int(last / r.starts.back().steps_per_epoch);
  else if (!val && !epochs.empty())
    done = epochs.back().epoch;
  const MetricsEval* best = nullptr;
  for (const MetricsEval& e : r.evals)
    if (std::isfinite(e.top1) && (!best || e.top1 > best->top1)) best = &e;
  // The steady state: the step records from epoch 2 on, or all of a 1-epoch run.
  std::vector<double> ips, wait, busy, device_wait, idle, ratio;
  const bool later = std::any_of(r.steps.begin(), r.steps.end(),
                                 [](const MetricsStep& s) { return s.epoch >= 2; });
  for (const MetricsStep& s : r.steps)
    if (!later || s.epoch >= 2) {
      ips.push_back(s.images_per_s), wait.push_back(s.data_wait_pct);
      busy.push_back(s.busy_pct), device_wait.push_back(s.device_wait_pct);
      idle.push_back(s.idle_pct), ratio.push_back(s.pipeline_ratio);
    }
  // The bound: the rule of data/metrics.h on the medians (in % of the wall time).
  DeviceTime median_time;
  median_time.compute_s = median(busy), median_time.wait_s = median(device_wait);
  median_time.idle_s = median(idle);
  const Bound bound = std::isfinite(median_time.wall_s()) ? run_bound(median_time)
                                                          : Bound::unknown;
  std::string device = r.starts.empty() ? "" : r.starts.back().device;
  if (device.empty())
    device = config_value(in, "devices").empty() ? config_value(in, "device")
                                                 : "replicas " + config_value(in, "devices");

  auto kpi = [](const std::string& k, const std::string& v, const std::string& s) {
    return "<div class=\"kpi\"><div class=\"k\">" + k + "</div><div class=\"v\">" + v +
           "</div><div class=\"s\">" + s + "</div></div>";
  };
  std::string h = "<header><div class=\"eyebrow\">cutrain run report</div><h1>" +
                  html_escape(in.title) + "</h1>\n<p class=\"meta\">model <b>" +
                  html_escape(config_value(in, "model")) + "</b> &middot; data <b>" +
                  html_escape(config_value(in, "train")) + "</b>";
  // --limit-train / --limit-val: the first N samples.
  auto limit = [&](const char* key) {
    const std::string n = config_value(in, key);
    return std::atoll(n.c_str()) > 0 ? " (the first " + html_escape(n) + ")" : std::string();
  };
  h += limit("limit_train");
  const std::string val_data = config_value(in, "val");
  const std::string split = config_value(in, "val_split");
  if (!val_data.empty())
    h += " &rarr; validation <b>" + html_escape(val_data) + "</b>" + limit("limit_val");
  else if (!split.empty() && std::atof(split.c_str()) > 0)
    h += " &rarr; validation <b>" + html_escape(split) + " held out</b>";
  h += " &middot; device <b>" + html_escape(device) + "</b> &middot; batch <b>" +
       html_escape(config_value(in, "batch")) + "</b> &middot; step <b>" +
       std::to_string(last) + "</b>";
  if (!val) h += " &middot; <b>no validation data</b>: the charts show training only";
  h += "</p>\n<div class=\"kpis\">";
  h += kpi("epochs", std::to_string(done) + " / " + std::to_string(total),
           std::to_string(last) + " steps" +
               (r.starts.size() > 1 ? ", " + std::to_string(r.starts.size()) + " processes" : ""));
  h += best ? kpi("best val top-1", fmt("%.2f%%", 100 * best->top1),
                  "epoch " + std::to_string(best->epoch) + ", top-5 " +
                      fmt("%.2f%%", 100 * best->top5))
            : kpi("best val top-1", "&ndash;", "no validation data");
  h += epochs.empty() ? kpi("final train loss", "&ndash;", "no step records")
                      : kpi("final train loss", fmt("%.4f", epochs.back().loss),
                            "epoch " + std::to_string(epochs.back().epoch) + " mean &middot; acc " +
                                fmt("%.1f%%", 100 * epochs.back().accuracy));
  h += kpi("wall time", duration(r.wall_s), "training and evaluation");
  h += kpi("images/s", fmt("%.0f", median(ips)),
           later ? "median, epoch 2 on" : "median of the records");
  if (bound == Bound::unknown)  // records without the device's clock: the host's wait alone
    h += kpi("data wait", fmt("%.1f%%", median(wait)), "the host in Loader::next()");
  else
    h += kpi(std::string(bound_name(bound)) + "-bound", fmt("busy %.0f%%", median_time.compute_s),
             "pipeline ratio " + fmt("%.2f", median(ratio)) + " &middot; waits for data " +
                 fmt("%.1f%%", median_time.wait_s));
  return h + "</div></header>\n";
}

std::string epoch_table(const ReportInput& in, const std::vector<EpochTrain>& epochs) {
  std::map<int, const EpochTrain*> train;
  std::map<int, const MetricsEval*> val;
  for (const EpochTrain& e : epochs) train[e.epoch] = &e;
  for (const MetricsEval& e : in.records.evals) val[e.epoch] = &e;
  std::map<int, bool> all;
  for (auto& kv : train) all[kv.first] = true;
  for (auto& kv : val) all[kv.first] = true;
  std::string s = "<h2>Per epoch</h2>\n<div class=\"card\"><table><tr><th>epoch</th>"
                  "<th class=\"n\">step</th><th class=\"n\">train loss</th>"
                  "<th class=\"n\">train acc</th><th class=\"n\">val loss</th>"
                  "<th class=\"n\">val top-1</th><th class=\"n\">val top-5</th>"
                  "<th class=\"n\" title=\"seconds since the process started "
                  "training, at the evaluation\">elapsed</th></tr>\n";
  for (const auto& [epoch, unused] : all) {
    const EpochTrain* t = train.count(epoch) ? train[epoch] : nullptr;
    const MetricsEval* v = val.count(epoch) ? val[epoch] : nullptr;
    s += "<tr><td>" + std::to_string(epoch) + "</td><td class=\"n\">" +
         std::to_string(v ? v->step : t->last_step) + "</td><td class=\"n\">" +
         (t ? fmt("%.4f", t->loss) : "&ndash;") + "</td><td class=\"n\">" +
         (t ? fmt("%.2f%%", 100 * t->accuracy) : "&ndash;") + "</td><td class=\"n\">" +
         (v ? fmt("%.4f", v->loss) : "&ndash;") + "</td><td class=\"n\">" +
         (v ? fmt("%.2f%%", 100 * v->top1) : "&ndash;") + "</td><td class=\"n\">" +
         (v ? fmt("%.2f%%", 100 * v->top5) : "&ndash;") + "</td><td class=\"n\">" +
         (v ? duration(v->time) : "&ndash;") + "</td></tr>\n";
  }
  return s + "</table></div>\n";
}

std::string skipped_and_bad(const ReportInput& in) {
  const RunRecords& r = in.records;
  std::string s = "<div class=\"grid\">\n<div><h2>Skipped steps (" +
                  std::to_string(r.skips.size()) + ")</h2><div class=\"card\">";
  if (r.skips.empty()) {
    s += "<p>None: every step updated the weights.</p>";
  } else {
    s += "<table><tr><th class=\"n\">step</th><th>first inf/NaN gradient</th><th class=\"n\">"
         "loss scale after</th></tr>\n";
    for (size_t i = 0; i < r.skips.size() && i < 200; i++)
      s += "<tr><td class=\"n\">" + std::to_string(r.skips[i].step) + "</td><td><code>" +
           html_escape(r.skips[i].parameter) + "</code></td><td class=\"n\">" +
           fmt("%g", r.skips[i].loss_scale) + "</td></tr>\n";
    s += "</table>";
    if (r.skips.size() > 200)
      s += "<p class=\"note\">... and " + std::to_string(r.skips.size() - 200) +
           " more, in the metrics file's \"skip\" records.</p>";
  }
  const int64_t val_bad = r.evals.empty() ? 0 : r.evals.back().bad_files;
  s += "</div></div>\n<div><h2>Bad files (" + std::to_string(in.bad_files.size() + val_bad) +
       ")</h2><div class=\"card\"><p>Training data: " +
       (in.bad_files.empty() ? std::string("none skipped")
                             : std::to_string(in.bad_files.size()) + " skipped (bad_files.txt)") +
       ". Validation data: " +
       (r.evals.empty() ? std::string("none evaluated")
        : val_bad > 0   ? std::to_string(val_bad) + " skipped at the last evaluation (named on "
                                                    "the run's stderr)"
                        : std::string("none skipped")) +
       ".</p>";
  if (!in.bad_files.empty()) {
    s += "<table><tr><th>training file</th><th>kind</th><th>why</th></tr>\n";
    for (size_t i = 0; i < in.bad_files.size() && i < 100; i++)
      s += "<tr><td><code>" + html_escape(in.bad_files[i].path) + "</code></td><td>" +
           html_escape(in.bad_files[i].kind) + "</td><td>" + html_escape(in.bad_files[i].message) +
           "</td></tr>\n";
    s += "</table>";
    if (in.bad_files.size() > 100)
      s += "<p class=\"note\">... and " + std::to_string(in.bad_files.size() - 100) +
           " more, in bad_files.txt.</p>";
  }
  return s + "</div></div>\n</div>\n";
}

std::string links(const std::vector<ReportLink>& list) {
  std::string s = "<table>";
  for (const ReportLink& l : list) {
    const bool best = l.note.find("the best") != std::string::npos;
    const std::string name = html_escape(l.name);
    s += "<tr><td>" +
         (l.href.empty() ? name : "<a href=\"" + html_escape(l.href) + "\">" + name + "</a>") +
         (best ? "<span class=\"best\">best</span>" : "") + "</td><td class=\"note\">" +
         html_escape(l.note) + "</td></tr>\n";
  }
  return s + "</table>";
}

std::string files_and_config(const ReportInput& in) {
  std::string s = "<div class=\"grid\">\n<div><h2>Checkpoints</h2><div class=\"card\">" +
                  (in.checkpoints.empty() ? std::string("None yet.") : links(in.checkpoints)) +
                  "</div></div>\n<div><h2>Files</h2><div class=\"card\">" + links(in.files) +
                  "</div></div>\n</div>\n";
  // The configuration: the one-line values in two tables side by side, then each value of
  // several lines (the model's description) in a column of its own.
  std::vector<std::pair<std::string, std::string>> rows, blocks;
  for (const auto& [key, value] : in.config)
    (value.find('\n') != std::string::npos ? blocks : rows).emplace_back(key, value);
  std::string columns = "1fr 1fr";
  for (size_t i = 0; i < blocks.size(); i++) columns += " auto";
  s += "<h2>Configuration</h2>\n<div class=\"card cfg\" style=\"grid-template-columns:" +
       columns + "\">";
  const size_t half = (rows.size() + 1) / 2;
  for (size_t part = 0; part < 2; part++) {
    s += "<table>";
    for (size_t i = part * half; i < std::min(rows.size(), (part + 1) * half); i++) {
      const std::string& v = rows[i].second;
      s += "<tr><td>" + html_escape(rows[i].first) + "</td><td>" +
           (v.empty() ? "<span class=\"muted\">&ndash;</span>"
                      : html_escape(v.size() > 600 ? v.substr(0, 600) + " ..." : v)) +
           "</td></tr>\n";
    }
    s += "</table>";
  }
  for (const auto& [key, value] : blocks)
    s += "<div><p class=\"muted\">" + html_escape(key) + "</p><pre>" + html_escape(value) +
         "</pre></div>";
  return s + "</div>\n";
}

}  // namespace

std::string report_html(const ReportInput& in) {
  const std::vector<EpochTrain> epochs = train_epochs(in.records);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                  "<title>cutrain report: " + html_escape(in.title) + "</title>\n<style>" +
                  kStyle + "</style></head>\n<body><main>\n";
  s += header(in, epochs);
  s += training_charts(in, epochs);
  s += last_evaluation(in);
  s += epoch_table(in, epochs);
  s += skipped_and_bad(in);
  s += files_and_config(in);
  s += "<footer>Made by <code>cutrain report</code> from " + std::to_string(in.records.lines) +
       " records of " + html_escape(in.metrics_name) +
       (in.records.unreadable ? " (" + std::to_string(in.records.unreadable) + " unreadable lines "
                                "skipped)" : std::string()) +
       (in.generated.empty() ? "" : ", " + html_escape(in.generated)) +
       ". Charts draw at most " + std::to_string(kMaxChartPoints) + " points a series (each "
       "stretch's lowest and highest); hover a point for its value.</footer>\n";
  return s + "</main></body></html>\n";
}

}  // namespace cutrain
