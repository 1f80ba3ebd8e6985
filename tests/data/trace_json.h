// defines: what the trace tests share to read a written trace back: read_json (parse a file
// with nlohmann-json), ns (a "ts"/"dur" in us as integer ns), span_problems (negative times,
// or spans on one row that neither nest nor follow each other), row_names (tid -> the row's
// name) and spans_named.
#pragma once
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace cutrain_test {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);  // throws on anything that is not JSON: the test fails
}

inline int64_t ns(const nlohmann::json& us) { return std::llround(us.get<double>() * 1000); }

// Checks every "X" event: ts, dur >= 0, and on each row (pid, tid) any two spans either nest
// or do not overlap. Returns "" when all is well, else what is wrong.
inline std::string span_problems(const nlohmann::json& trace) {
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> rows;  // tid -> (begin, end) in ns
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int64_t ts = ns(e.at("ts")), dur = ns(e.at("dur"));
    if (ts < 0 || dur < 0) return "negative ts or dur in " + e.dump();
    rows[e.at("tid").get<int>()].push_back({ts, ts + dur});
  }
  for (auto& row : rows) {
    auto& spans = row.second;
    // outer spans first: by begin, then the longer one first
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open_ends;  // the ends of the spans enclosing the current one
    for (const auto& s : spans) {
      while (!open_ends.empty() && open_ends.back() <= s.first) open_ends.pop_back();
      if (!open_ends.empty() && s.second > open_ends.back())
        return "row " + std::to_string(row.first) + ": span [" + std::to_string(s.first) + ", " +
               std::to_string(s.second) + ") ns overlaps its parent ending at " +
               std::to_string(open_ends.back());
      open_ends.push_back(s.second);
    }
  }
  return "";
}

// tid -> name, from the thread_name metadata events.
inline std::map<int, std::string> row_names(const nlohmann::json& trace) {
  std::map<int, std::string> names;
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  return names;
}

inline std::vector<nlohmann::json> spans_named(const nlohmann::json& trace,
                                               const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name") == name) out.push_back(e);
  return out;
}

}  // namespace cutrain_test
