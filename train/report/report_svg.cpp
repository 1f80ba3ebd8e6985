#include "train/report/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "data/text_width.h"

namespace cutrain {

namespace {

// The line chart's frame, in viewBox units (the page scales it): the plot is the rectangle
// inside the margins, the tick labels and axis labels sit in the margins.
constexpr double kW = 600, kH = 250, kLeft = 60, kRight = 16, kTop = 12, kBottom = 42;
constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;
constexpr size_t kMaxHoverPoints = 200;  // hover targets per line series (every k-th point)

// A coordinate: one decimal is a tenth of a pixel, enough and short.
std::string px(double v) { return printf_str("%.1f", v); }

// A tick's label, with the decimals its spacing needs: 0.25 / 0.5 -> "0.25", "0.50";
// 20000 / 5000 -> "20k"; tiny or huge spacings in short scientific form ("1e-4").
std::string tick_label(double v, double step) {
  if (std::fabs(v) < step * 1e-9) return "0";
  if (step < 1e-3 || std::fabs(v) >= 1e7) {
    std::string s = printf_str("%.2g", v);  // "1e-04" -> "1e-4"
    const size_t e = s.find("e-0");
    if (e != std::string::npos) s.erase(e + 2, 1);
    return s;
  }
  if (std::fabs(v) >= 1e4 && step >= 1000) return tick_label(v / 1000, step / 1000) + "k";
  const int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  return printf_str(("%." + std::to_string(decimals) + "f").c_str(), v);
}

// "1200" for whole numbers, else 4 significant digits.
std::string x_text(double x) {
  return x == std::floor(x) && std::fabs(x) < 1e15 ? printf_str("%.0f", x) : printf_str("%.4g", x);
}

struct Axis {
  double lo = 0, hi = 1;       // the domain (log2 units on a log axis)
  std::vector<double> ticks;   // in the same units
  double step = 1;
  bool log2 = false;
  std::string label(double t) const {
    return log2 ? "2<tspan dy=\"-5\" font-size=\"8\">" + printf_str("%.0f", t) + "</tspan>"
                : tick_label(t, step);
  }
};

// The y axis: nice ticks around the finite values (log2 units on a log axis, whole powers).
Axis y_axis(const LineChart& c) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ChartSeries& s : c.series)
    for (const ChartPoint& p : s.points) {
      double v = p.y * s.scale;
      if (c.log2_y) v = v > 0 ? std::log2(v) : NAN;
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  Axis a;
  a.log2 = c.log2_y;
  if (!(lo <= hi)) return a;  // no finite value: the frame only
  if (c.log2_y) {
    lo = std::floor(lo), hi = std::ceil(hi);
    if (lo == hi) lo -= 1, hi += 1;
    a.step = std::ceil((hi - lo) / 5);
    for (double t = lo; t < hi + a.step; t += a.step) a.ticks.push_back(t);
  } else {
    if (c.y_from_zero) lo = std::min(lo, 0.0);
    if (lo == hi) {  // one value: a band around it
      const double d = lo != 0 ? std::fabs(lo) * 0.05 : 1;
      lo = c.y_from_zero && lo >= 0 ? std::max(0.0, lo - d) : lo - d, hi += d;
    }
    a.ticks = nice_ticks(lo, hi, 5, &a.step);
  }
  a.lo = a.ticks.front(), a.hi = a.ticks.back();
  return a;
}

// The x axis: from 0 (or the smallest x) to the largest x, ticks inside it, whole numbers.
Axis x_axis(const LineChart& c) {
  double lo = 0, hi = -std::numeric_limits<double>::infinity();
  for (const ChartSeries& s : c.series)
    for (const ChartPoint& p : s.points) lo = std::min(lo, p.x), hi = std::max(hi, p.x);
  for (const ChartMark& m : c.marks) lo = std::min(lo, m.x), hi = std::max(hi, m.x);
  Axis a;
  if (!(hi > lo)) hi = lo + 1;
  a.lo = lo, a.hi = hi;
  for (double t : nice_ticks(lo, hi, 6, &a.step))
    if (t >= lo && t <= hi) a.ticks.push_back(t);
  if (a.step < 1) {  // steps and epochs are whole: no tick between them
    a.step = 1, a.ticks.clear();
    for (double t = std::ceil(lo); t <= hi; t++) a.ticks.push_back(t);
  }
  return a;
}

}  // namespace

std::string printf_str(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string html_escape(const std::string& text) {
  // Line breaks and tabs stay (a <pre> shows them); each stretch between them made printable.
  std::string safe;
  for (size_t b = 0; b <= text.size();) {
    const size_t e = std::min(text.find_first_of("\n\t", b), text.size());
    safe += printable(std::string_view(text).substr(b, e - b));
    if (e < text.size()) safe += text[e];
    b = e + 1;
  }
  std::string out;
  for (char ch : safe) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target, double* step) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double s = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;  // 1, 2 or 5 x 10^k
  std::vector<double> ticks;
  const double first = std::floor(lo / s + 1e-9) * s;
  for (int i = 0; first + i * s < hi + s * 1e-9 || i == 0; i++) {
    const double t = first + i * s;
    ticks.push_back(std::fabs(t) < s * 1e-9 ? 0 : t);  // no "-0"
  }
  if (ticks.back() < hi - s * 1e-9) ticks.push_back(ticks.back() + s);
  if (step) *step = s;
  return ticks;
}

std::vector<ChartPoint> downsample(const std::vector<ChartPoint>& p, size_t max_points) {
  if (p.size() <= max_points || max_points < 4) return p;
  const size_t buckets = max_points / 2 - 1;  // room for the first and the last point
  std::vector<ChartPoint> out = {p.front()};
  for (size_t b = 0; b < buckets; b++) {
    const size_t begin = b * p.size() / buckets, end = (b + 1) * p.size() / buckets;
    size_t lo = end, hi = end;  // end: none yet
    bool gap = false;
    for (size_t i = begin; i < end; i++) {
      if (std::isnan(p[i].y)) {
        gap = true;
      } else {
        if (lo == end || p[i].y < p[lo].y) lo = i;
        if (hi == end || p[i].y > p[hi].y) hi = i;
      }
    }
    if (lo != end)
      for (size_t i : {std::min(lo, hi), std::max(lo, hi)})
        if (p[i].x > out.back().x) out.push_back(p[i]);
    if (gap) out.push_back({p[end - 1].x, NAN});
  }
  if (p.back().x > out.back().x || std::isnan(out.back().y)) out.push_back(p.back());
  return out;
}

std::string line_chart(const LineChart& c) {
  const Axis xa = x_axis(c), ya = y_axis(c);
  auto sx = [&](double x) { return kLeft + (x - xa.lo) / (xa.hi - xa.lo) * kPlotW; };
  auto sy = [&](double v) { return kTop + (1 - (v - ya.lo) / (ya.hi - ya.lo)) * kPlotH; };
  std::string s = "<svg class=\"chart\" viewBox=\"0 0 " + px(kW) + " " + px(kH) +
                  "\" width=\"100%\" role=\"img\" aria-label=\"" + html_escape(c.label) + "\">\n";
  // Grid lines and tick labels, then the axes over them.
  for (double t : ya.ticks)
    s += "<line class=\"grid\" x1=\"" + px(kLeft) + "\" x2=\"" + px(kW - kRight) + "\" y1=\"" +
         px(sy(t)) + "\" y2=\"" + px(sy(t)) + "\"/><text class=\"tick\" x=\"" + px(kLeft - 6) +
         "\" y=\"" + px(sy(t) + 4) + "\" text-anchor=\"end\">" + ya.label(t) + "</text>\n";
  for (double t : xa.ticks)
    s += "<line class=\"grid\" x1=\"" + px(sx(t)) + "\" x2=\"" + px(sx(t)) + "\" y1=\"" +
         px(kTop) + "\" y2=\"" + px(kTop + kPlotH) + "\"/><text class=\"tick\" x=\"" +
         px(sx(t)) + "\" y=\"" + px(kTop + kPlotH + 15) + "\" text-anchor=\"middle\">" +
         xa.label(t) + "</text>\n";
  s += "<path class=\"ax\" d=\"M" + px(kLeft) + " " + px(kTop) + "V" + px(kTop + kPlotH) + "H" +
       px(kW - kRight) + "\"/>\n";
  s += "<text class=\"lbl\" x=\"" + px(kLeft + kPlotW / 2) + "\" y=\"" + px(kH - 6) +
       "\" text-anchor=\"middle\">" + html_escape(c.x_label) + "</text>\n";
  s += "<text class=\"lbl\" transform=\"translate(14 " + px(kTop + kPlotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + html_escape(c.y_label) + "</text>\n";
  if (ya.ticks.empty())
    return s + "<text class=\"lbl\" x=\"" + px(kLeft + kPlotW / 2) + "\" y=\"" +
           px(kTop + kPlotH / 2) + "\" text-anchor=\"middle\">" + html_escape(c.empty_text) +
           "</text>\n</svg>";

  // The marks (skipped steps): a dashed line and a triangle to hover, at most one a pixel.
  double last_x = -1;
  for (const ChartMark& m : c.marks) {
    const double x = sx(m.x);
    if (x - last_x < 1) continue;
    last_x = x;
    s += "<g class=\"mark\" stroke=\"" + c.mark_color + "\" fill=\"" + c.mark_color +
         "\"><title>" + html_escape(m.title) + "</title><line x1=\"" + px(x) + "\" x2=\"" +
         px(x) + "\" y1=\"" + px(kTop) + "\" y2=\"" + px(kTop + kPlotH) +
         "\" stroke-dasharray=\"3 3\" opacity=\"0.55\"/><path d=\"M" + px(x - 4) + " " +
         px(kTop) + "h8l-4 7z\"/></g>\n";
  }
  // The series: a path broken at each missing value, dots or hover targets with titles.
  for (const ChartSeries& se : c.series) {
    auto value = [&](const ChartPoint& p) {
      const double v = p.y * se.scale;
      return c.log2_y ? (v > 0 ? std::log2(v) : NAN) : v;
    };
    auto title = [&](size_t i) {
      const ChartPoint& p = se.points[i];
      return "<title>" +
             html_escape(i < se.titles.size()
                             ? se.titles[i]
                             : se.name + ", " + c.x_label + " " + x_text(p.x) + ": " +
                                   printf_str(se.format.c_str(), p.y * se.scale)) +
             "</title>";
    };
    s += "<g class=\"series\" stroke=\"" + se.color + "\" fill=\"" + se.color + "\">";
    if (se.line) {
      std::string d;
      bool pen = false;
      for (const ChartPoint& p : se.points) {
        const double v = value(p);
        if (!std::isfinite(v)) {
          pen = false;
          continue;
        }
        d += (pen ? "L" : "M") + px(sx(p.x)) + " " + px(sy(v));
        pen = true;
      }
      s += "<path fill=\"none\" stroke-width=\"" + px(se.width) + "\"" +
           (se.dashed ? " stroke-dasharray=\"6 4\"" : "") + " stroke-linejoin=\"round\" d=\"" +
           d + "\"/>";
    }
    const size_t n = se.points.size();  // hover targets: every dot, or every k-th point of a line
    const size_t every = se.dots ? 1 : (n + kMaxHoverPoints - 1) / kMaxHoverPoints;
    for (size_t i = 0; i < n; i += std::max<size_t>(1, every)) {
      const double v = value(se.points[i]);
      if (!std::isfinite(v)) continue;
      s += "<circle cx=\"" + px(sx(se.points[i].x)) + "\" cy=\"" + px(sy(v)) + "\" r=\"" +
           (se.dots ? "3.5\" stroke=\"#fff\" stroke-width=\"1\"" : "4\" class=\"hover\"") +
           ">" + title(i) + "</circle>";
    }
    s += "</g>\n";
  }
  return s + "</svg>";
}

std::string bar_chart(const std::vector<std::string>& names, const std::vector<double>& values,
                      const std::vector<std::string>& titles, const std::string& color,
                      int highlight, const std::string& highlight_color) {
  constexpr double kLabelW = 150, kBarX = 158, kBarW = 370, kTopAxis = 22;
  // Rows of 24 to 36 units: ten classes fill about the height of their confusion matrix.
  const double kRow = std::max(24.0, std::min(36.0, 360.0 / std::max<size_t>(1, names.size())));
  const double h = kTopAxis + kRow * double(names.size()) + 8;
  std::string s = "<svg class=\"chart\" viewBox=\"0 0 " + px(kW) + " " + px(h) +
                  "\" width=\"100%\" role=\"img\" aria-label=\"per-class accuracy\">\n";
  for (int pct = 0; pct <= 100; pct += 25) {
    const double x = kBarX + kBarW * pct / 100.0;
    s += "<line class=\"grid\" x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(kTopAxis) +
         "\" y2=\"" + px(h - 8) + "\"/><text class=\"tick\" x=\"" + px(x) + "\" y=\"" +
         px(kTopAxis - 8) + "\" text-anchor=\"middle\">" + std::to_string(pct) + "%</text>\n";
  }
  for (size_t i = 0; i < names.size(); i++) {
    const double y = kTopAxis + kRow * double(i), v = i < values.size() ? values[i] : NAN;
    const bool hl = int(i) == highlight;
    s += "<g><title>" + html_escape(i < titles.size() ? titles[i] : names[i]) + "</title>";
    s += "<text class=\"name\" x=\"" + px(kLabelW) + "\" y=\"" + px(y + kRow / 2 + 4) +
         "\" text-anchor=\"end\">" + html_escape(truncate_to_width(names[i], 22)) + "</text>";
    if (std::isfinite(v)) {
      const double w = std::max(0.0, std::min(1.0, v)) * kBarW;
      s += "<rect x=\"" + px(kBarX) + "\" y=\"" + px(y + 4) + "\" width=\"" + px(w) +
           "\" height=\"" + px(kRow - 8) + "\" rx=\"2\" fill=\"" +
           (hl ? highlight_color : color) + "\"/>";
      s += "<text class=\"val\" x=\"" + px(kBarX + w + 5) + "\" y=\"" + px(y + kRow / 2 + 4) +
           "\"" + (hl ? " style=\"fill:" + highlight_color + ";font-weight:600\"" : "") + ">" +
           printf_str("%.1f%%", 100 * v) + (hl ? "  worst" : "") + "</text>";
    }
    s += "</g>\n";
  }
  return s + "</svg>";
}

std::string heat_map(const std::vector<std::string>& names, const std::vector<int64_t>& counts) {
  const size_t K = names.size();
  if (K == 0 || counts.size() != K * K) return "";
  // kTail: room for the last column's slanted name beyond the matrix.
  constexpr double kLabelW = 132, kHead = 96, kMaxCell = 40, kAreaW = 440, kTail = 64;
  const double cell = std::min(kMaxCell, kAreaW / double(K));
  const bool numbers = K <= 20;
  const double w = kLabelW + cell * double(K) + kTail, h = kHead + cell * double(K) + 8;
  std::string s = "<svg class=\"chart heat\" viewBox=\"0 0 " + px(w) + " " + px(h) +
                  "\" width=\"" + px(w) + "\" role=\"img\" aria-label=\"confusion matrix\">\n";
  for (size_t c = 0; c < K; c++) {  // the predicted classes, slanted over their columns
    const double x = kLabelW + cell * (double(c) + 0.5);
    s += "<text class=\"name\" transform=\"translate(" + px(x + 3) + " " + px(kHead - 6) +
         ") rotate(-45)\">" + html_escape(truncate_to_width(names[c], 16)) + "</text>\n";
  }
  for (size_t r = 0; r < K; r++) {
    int64_t row = 0;
    for (size_t c = 0; c < K; c++) row += counts[r * K + c];
    const double y = kHead + cell * double(r);
    s += "<text class=\"name\" x=\"" + px(kLabelW - 6) + "\" y=\"" + px(y + cell / 2 + 4) +
         "\" text-anchor=\"end\">" + html_escape(truncate_to_width(names[r], 20)) + "</text>\n";
    for (size_t c = 0; c < K; c++) {
      const int64_t n = counts[r * K + c];
      const double share = row ? double(n) / double(row) : 0;
      // White to deep blue; the power lifts small shares so that a 5% confusion shows.
      const double t = std::pow(share, 0.6);
      const int R = int(248 + (29 - 248) * t), G = int(250 + (78 - 250) * t),
                B = int(252 + (216 - 252) * t);
      const double x = kLabelW + cell * double(c);
      s += "<g><title>" + html_escape("true " + names[r] + ", predicted " + names[c] + ": " +
                                      std::to_string(n) + " (" +
                                      printf_str("%.1f", 100 * share) + "% of the row)") +
           "</title><rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(cell) +
           "\" height=\"" + px(cell) + "\" fill=\"rgb(" + std::to_string(R) + "," +
           std::to_string(G) + "," + std::to_string(B) + ")\"" +
           (r == c ? " stroke=\"#0f172a\" stroke-width=\"1.2\"" : " stroke=\"#fff\"") + "/>";
      if (numbers && n > 0)
        s += "<text class=\"count\" x=\"" + px(x + cell / 2) + "\" y=\"" + px(y + cell / 2 + 4) +
             "\" text-anchor=\"middle\" fill=\"" + (t > 0.55 ? "#fff" : "#1e293b") + "\">" +
             std::to_string(n) + "</text>";
      s += "</g>";
    }
    s += "\n";
  }
  return s + "</svg>";
}

}  // namespace cutrain
