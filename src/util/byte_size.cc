#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace kvserve {
namespace {

struct Unit {
  const char* name;
  double factor;
};

constexpr Unit kUnits[] = {
    {"", 1.0},          {"b", 1.0},
    {"k", 1024.0},      {"kib", 1024.0},      {"kb", 1e3},
    {"m", 1048576.0},   {"mib", 1048576.0},   {"mb", 1e6},
    {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
    {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
};

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  const auto fail = [&] {
    return InvalidArgument(fmt::format(
        "'{}' is not a byte size: use a number with an optional unit, e.g. 2GiB, 512MiB, 1e9",
        text));
  };
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty()) return fail();
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number) || number < 0) return fail();
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // "kB"/"KB" is decimal, "KiB"/"K" binary; lower-casing keeps that distinction.
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    const double bytes = number * u.factor;
    if (bytes > 4.611686018427388e18) return fail();
    return static_cast<uint64_t>(std::llround(bytes));
  }
  return fail();
}

std::string FormatByteSize(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kNames[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kNames)) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kNames[u]);
}

}  // namespace kvserve
