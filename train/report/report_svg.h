// defines: the drawings of the run report (train/report/report.h), as inline SVG text: line_chart
// (axes, "nice" ticks, a linear or base-2 log y axis, series as lines or dots, vertical marks,
// a <title> on points for hovering), bar_chart (horizontal bars, one per class), heat_map (a
// K x K table of counts coloured by row share); html_escape; downsample (at most n points a
// series, keeping each bucket's lowest and highest point, so spikes survive).
//
// Nothing here reads files or knows what a run is: numbers in, SVG text out. Every chart has a
// fixed viewBox and width="100%", so the page's CSS grid sizes it and the text scales with it.
// Fonts and colours come from the page's CSS where they can (class names below: .ax the axes,
// .grid the grid lines, .tick the tick labels, .lbl the axis labels); a series' colour is its
// own, so that train and validation keep the same colours in every chart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

// &, <, >, " and ' as entities; invalid UTF-8, control characters but line breaks and tabs, and
// bidi controls as escapes ("\x1b", kernels/printable.h), so any run's names make valid HTML
// and SVG.
std::string html_escape(const std::string& text);

// printf of one number ("%.1f", v): the numbers of the charts and of the page.
std::string printf_str(const char* format, double v);

struct ChartPoint {
  double x = 0, y = 0;  // y NaN: no value (a null in the metrics): the line breaks there
};

struct ChartSeries {
  std::string name;                  // in the hover titles ("val top-1")
  std::string color;                 // a CSS colour ("#2563eb")
  std::vector<ChartPoint> points;    // by increasing x
  std::vector<std::string> titles;   // each point's hover title; empty: "<name>, step X: Y"
  bool dots = false;                 // a visible dot per point (per-epoch values), else a line
  bool line = true;                  // join the points
  bool dashed = false;
  double width = 1.5;                // the line's width in px
  std::string format = "%.4g";       // printf format of y in the hover titles
  double scale = 1;                  // y is drawn and shown times this (accuracy 0..1 -> %)
};

// A vertical mark across the plot at x, with a hover title (a skipped step).
struct ChartMark {
  double x = 0;
  std::string title;
};

struct LineChart {
  std::string label;                 // aria-label of the <svg>
  std::string x_label = "step", y_label;
  std::vector<ChartSeries> series;
  std::vector<ChartMark> marks;
  std::string mark_color = "#dc2626";
  bool log2_y = false;               // y on a base-2 log axis (the loss scale: powers of 2)
  bool y_from_zero = false;          // the y axis starts at 0 (rates, percentages)
  std::string empty_text = "no data";  // in the frame when no series has a finite point
};

// The chart as an <svg> element. Without a finite point it is an empty frame saying "no data".
std::string line_chart(const LineChart& c);

// One horizontal bar per row: names on the left, bars of value in [0, 1] (shown as %), the
// value at the bar's end, the row `highlight` (e.g. the worst class; -1: none) in
// highlight_color; titles[i] is row i's hover title.
std::string bar_chart(const std::vector<std::string>& names, const std::vector<double>& values,
                      const std::vector<std::string>& titles, const std::string& color,
                      int highlight, const std::string& highlight_color);

// A K x K table: counts[r * K + c] in row r, column c (rows: true class, columns: predicted),
// each cell's colour its share of its row (white 0 to deep blue 1), the count written in the
// cell while cells are large enough to read (K <= 20), every cell a hover title.
std::string heat_map(const std::vector<std::string>& names, const std::vector<int64_t>& counts);

// At most max_points points of `p` (by increasing x) for drawing, and a NaN point for each
// bucket below that held one: `p` unchanged when it has no more;
// else the first point, then of each of max_points / 2 - 1 buckets of consecutive points its
// lowest and its highest point in x order (and a NaN point after them where the bucket holds
// one, so the line's break stays), then the last point.
std::vector<ChartPoint> downsample(const std::vector<ChartPoint>& p, size_t max_points);

// About `target` evenly spaced round values (1, 2 or 5 times a power of ten apart) covering
// [lo, hi]: the first <= lo, the last >= hi. *step gets the spacing.
std::vector<double> nice_ticks(double lo, double hi, int target, double* step);

}  // namespace cutrain
