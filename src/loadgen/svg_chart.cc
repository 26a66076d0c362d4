#include "loadgen/svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kvserve::loadgen::svg {
namespace {

constexpr double kWidth = 520, kHeight = 250;
constexpr double kLeft = 58, kRight = 16, kTop = 34, kBottom = 44;

// The plot area and the mapping of data to it.
struct Frame {
  double x0, x1, y0, y1;  // data ranges
  double X(double x) const {
    return kLeft + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (kWidth - kLeft - kRight);
  }
  double Y(double y) const {
    return kHeight - kBottom - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (kHeight - kTop - kBottom);
  }
};

std::string Num(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 1) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2g}", v);
}

std::string Open(const std::string& title) {
  return fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><title>{2}</title>"
      "<text x=\"{3}\" y=\"20\" class=\"ctitle\">{2}</text>",
      kWidth, kHeight, Escape(title), kLeft);
}

// Axes, grid lines, tick labels and axis labels; widens the frame to the outer ticks.
std::string Axes(Frame& f, const std::string& x_label, const std::string& y_label) {
  const auto xt = NiceTicks(f.x0, f.x1);
  const auto yt = NiceTicks(f.y0, f.y1);
  if (!xt.empty()) f.x0 = std::min(f.x0, xt.front()), f.x1 = std::max(f.x1, xt.back());
  if (!yt.empty()) f.y0 = std::min(f.y0, yt.front()), f.y1 = std::max(f.y1, yt.back());
  std::string s;
  for (double t : yt) {
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>",
                     kLeft, kWidth - kRight, f.Y(t), f.Y(t));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>",
                     kLeft - 6, f.Y(t) + 4, Num(t));
  }
  for (double t : xt) {
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" class=\"axis\"/>",
                     f.X(t), kHeight - kBottom, kHeight - kBottom + 4);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
                     f.X(t), kHeight - kBottom + 17, Num(t));
  }
  s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" class=\"axis\"/>", kLeft,
                   kWidth - kRight, kHeight - kBottom);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"alabel\" text-anchor=\"middle\">{}</text>",
                   (kLeft + kWidth - kRight) / 2, kHeight - 8, Escape(x_label));
  if (!y_label.empty()) {
    s += fmt::format(
        "<text transform=\"translate(14 {:.1f}) rotate(-90)\" class=\"alabel\" "
        "text-anchor=\"middle\">{}</text>",
        (kTop + kHeight - kBottom) / 2, Escape(y_label));
  }
  return s;
}

std::string Empty(const std::string& title) {
  return Open(title) +
         fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">no data</text></svg>",
                     kWidth / 2, kHeight / 2);
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi >= lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi == lo) {
    hi = lo + (lo == 0 ? 1 : std::abs(lo) * 0.1);
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step) * step;
  for (double t = first; t <= hi + step * 0.999 && ticks.size() < 50; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi) break;
  }
  return ticks;
}

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Histogram(const std::vector<double>& values, const std::string& title,
                      const std::string& x_label, const std::vector<Marker>& markers,
                      int num_bins) {
  if (values.empty()) return Empty(title);
  const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  double lo = *mn, hi = *mx;
  if (hi <= lo) hi = lo + std::max(1e-3, std::abs(lo) * 0.1);
  std::vector<int> counts(static_cast<size_t>(num_bins), 0);
  for (double v : values) {
    const int b = std::clamp(static_cast<int>((v - lo) / (hi - lo) * num_bins), 0, num_bins - 1);
    ++counts[static_cast<size_t>(b)];
  }
  Frame f{lo, hi, 0, static_cast<double>(*std::max_element(counts.begin(), counts.end()))};
  std::string s = Open(title) + Axes(f, x_label, "requests");
  const double bw = (hi - lo) / num_bins;
  for (int b = 0; b < num_bins; ++b) {
    const int c = counts[static_cast<size_t>(b)];
    if (c == 0) continue;
    const double x = f.X(lo + b * bw), x2 = f.X(lo + (b + 1) * bw);
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"bar\">"
        "<title>{} – {}: {}</title></rect>",
        x + 0.5, f.Y(c), std::max(0.5, x2 - x - 1), f.Y(0) - f.Y(c), Num(lo + b * bw),
        Num(lo + (b + 1) * bw), c);
  }
  int i = 0;
  for (const Marker& m : markers) {
    const double x = f.X(m.x);
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"marker\"/>",
                     x, kTop, kHeight - kBottom);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"mlabel\">{} {}</text>", x + 3,
                     kTop + 10 + 12 * (i++ % 3), Escape(m.label), Num(m.x));
  }
  return s + "</svg>";
}

std::string LineChart(const std::vector<Series>& series, const std::string& title,
                      const std::string& x_label, const std::string& y_label) {
  double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
  for (const Series& se : series) {
    for (double x : se.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
    for (double y : se.y) y1 = std::max(y1, y);
  }
  if (!std::isfinite(x0)) return Empty(title);
  Frame f{x0, x1, 0, y1};
  std::string s = Open(title) + Axes(f, x_label, y_label);
  double legend_x = kWidth - kRight;
  for (auto it = series.rbegin(); it != series.rend(); ++it) {
    const Series& se = *it;
    std::string pts;
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      pts += fmt::format("{:.1f},{:.1f} ", f.X(se.x[i]), f.Y(se.y[i]));
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                     pts, se.color);
    legend_x -= 8.0 * static_cast<double>(se.name.size()) + 26;
    s += fmt::format("<rect x=\"{:.1f}\" y=\"12\" width=\"12\" height=\"3\" fill=\"{}\"/>"
                     "<text x=\"{:.1f}\" y=\"17\" class=\"tick\">{}</text>",
                     legend_x, se.color, legend_x + 16, Escape(se.name));
  }
  return s + "</svg>";
}

std::string Scatter(const std::vector<double>& x, const std::vector<double>& y,
                    const std::vector<double>& c, const std::string& title,
                    const std::string& x_label, const std::string& y_label,
                    const std::string& color_label) {
  if (x.empty()) return Empty(title);
  const auto [xn, xx] = std::minmax_element(x.begin(), x.end());
  Frame f{*xn, *xx, 0, *std::max_element(y.begin(), y.end())};
  std::string s = Open(title) + Axes(f, x_label, y_label);
  auto color = [](double t) {
    t = std::clamp(t, 0.0, 1.0);
    // #5b7fa6 (no hits) to #f28c28 (all cached).
    const int r = static_cast<int>(0x5b + t * (0xf2 - 0x5b));
    const int g = static_cast<int>(0x7f + t * (0x8c - 0x7f));
    const int b = static_cast<int>(0xa6 + t * (0x28 - 0xa6));
    return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
  };
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double ci = i < c.size() ? c[i] : 0;
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" fill-opacity=\"0.8\">"
                     "<title>{}: {} ({} {:.0f}%)</title></circle>",
                     f.X(x[i]), f.Y(y[i]), color(ci), Num(x[i]), Num(y[i]), Escape(color_label),
                     100 * ci);
  }
  s += fmt::format("<text x=\"{}\" y=\"17\" class=\"tick\" text-anchor=\"end\">{}: "
                   "<tspan fill=\"{}\">0%</tspan> → <tspan fill=\"{}\">100%</tspan></text>",
                   kWidth - kRight, Escape(color_label), color(0), color(1));
  return s + "</svg>";
}

std::string Bars(const std::vector<Bar>& bars, const std::string& title) {
  if (bars.empty()) return Empty(title);
  double mx = 0;
  for (const Bar& b : bars) mx = std::max(mx, b.value);
  if (mx <= 0) mx = 1;
  const double label_w = 170, bar_h = 26, gap = 12;
  const double height = kTop + static_cast<double>(bars.size()) * (bar_h + gap) + 10;
  std::string s = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><title>{2}</title>"
      "<text x=\"{3}\" y=\"20\" class=\"ctitle\">{2}</text>",
      kWidth, height, Escape(title), kLeft);
  double y = kTop;
  for (const Bar& b : bars) {
    const double w = (kWidth - label_w - 90) * b.value / mx;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>",
                     label_w - 8, y + bar_h / 2 + 4, Escape(b.label));
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" rx=\"3\"/>",
                     label_w, y, std::max(1.0, w), bar_h, b.color);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\">{}</text>", label_w + w + 6,
                     y + bar_h / 2 + 4, Num(b.value));
    y += bar_h + gap;
  }
  return s + "</svg>";
}

}  // namespace kvserve::loadgen::svg
