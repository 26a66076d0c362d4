// Small SVG charts for the HTML report: axes with "nice" ticks, and histogram, line and scatter
// series. Pure functions of their data; the output is an <svg> element.
#pragma once

#include <string>
#include <vector>

namespace kvserve::loadgen::svg {

// About `target` evenly spaced round values (1, 2 or 5 x 10^k apart) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target = 5);

// Escapes &, <, >, " for HTML text and attributes.
std::string Escape(const std::string& text);

struct Marker {
  double x;
  std::string label;  // "p50"
};

// Histogram of `values` in `num_bins` bins over [min, max], with vertical markers.
std::string Histogram(const std::vector<double>& values, const std::string& title,
                      const std::string& x_label, const std::vector<Marker>& markers,
                      int num_bins = 30);

struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y;
};

// Line chart (step-free polyline per series) with a legend.
std::string LineChart(const std::vector<Series>& series, const std::string& title,
                      const std::string& x_label, const std::string& y_label);

// Scatter of points (x[i], y[i]) coloured by c[i] in [0, 1] (grey-blue to orange).
std::string Scatter(const std::vector<double>& x, const std::vector<double>& y,
                    const std::vector<double>& c, const std::string& title,
                    const std::string& x_label, const std::string& y_label,
                    const std::string& color_label);

struct Bar {
  std::string label;
  double value;
  std::string color;
};

// Horizontal bars with their values written at their ends.
std::string Bars(const std::vector<Bar>& bars, const std::string& title);

}  // namespace kvserve::loadgen::svg
