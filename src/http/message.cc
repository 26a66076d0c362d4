#include "http/message.h"

#include <boost/beast/http/status.hpp>
#include <ostream>  // Boost 1.81's string_view header streams without including <ostream>

namespace kvserve::http {

namespace {

char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Header names are ASCII by RFC 9110; a locale-aware comparison would be wrong for them.
bool NameEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::string_view FindHeader(const Headers& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (NameEquals(key, name)) return value;
  }
  return {};
}

size_t CountHeaders(const Headers& headers, std::string_view name) {
  size_t n = 0;
  for (const auto& header : headers) {
    if (NameEquals(header.first, name)) ++n;
  }
  return n;
}

std::string_view StatusText(int status) {
  namespace bhttp = boost::beast::http;
  if (status < 0) return "Unknown";
  const bhttp::status code = bhttp::int_to_status(static_cast<unsigned>(status));
  if (code == bhttp::status::unknown) return "Unknown";
  return bhttp::obsolete_reason(code);
}

}  // namespace kvserve::http
