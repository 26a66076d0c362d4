#include "http/request.h"

#include <fmt/format.h>

#include <iterator>
#include <string_view>

#include <boost/asio/buffer.hpp>

namespace kvserve::http {

namespace bhttp = boost::beast::http;

void ConfigureParser(RequestParser& parser, const Limits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body_bytes);
}

Refusal RefusalFor(const boost::beast::error_code& ec) {
  if (ec == bhttp::error::header_limit) {
    return {431, "the request's headers are too large"};
  }
  if (ec == bhttp::error::body_limit) return {413, "the request body is too large"};
  if (ec == bhttp::error::bad_content_length) return {400, "invalid Content-Length"};
  if (ec == bhttp::error::multiple_content_length) {
    return {400, "conflicting Content-Length headers"};
  }
  if (ec == bhttp::error::bad_transfer_encoding) {
    // Beast also ends here when a chunked body comes with a Content-Length.
    return {400, "invalid Transfer-Encoding: a request may carry only 'chunked', and never "
                 "both Content-Length and Transfer-Encoding"};
  }
  if (ec == bhttp::error::bad_chunk || ec == bhttp::error::bad_chunk_extension) {
    return {400, "malformed chunked body"};
  }
  // Beast reads only HTTP/1.0 and 1.1; a request line with bare LF endings also lands here.
  if (ec == bhttp::error::bad_version) {
    return {400, "malformed request line or unsupported HTTP version: send HTTP/1.1"};
  }
  if (ec == bhttp::error::buffer_overflow) {
    return {431, "the request's headers or trailers are too large"};
  }
  if (ec == bhttp::error::bad_target) return {400, "malformed request target"};
  if (ec == bhttp::error::bad_method) return {400, "malformed request method"};
  if (ec == bhttp::error::bad_field || ec == bhttp::error::bad_value) {
    return {400, "malformed header field"};
  }
  if (ec == bhttp::error::partial_message) return {400, "the request ended early"};
  return {400, fmt::format("malformed request: {}", ec.message())};
}

std::optional<Refusal> CheckHead(const RequestParser& parser, const Limits& limits) {
  const auto& head = parser.get();
  if (auto refusal = CheckFieldCount(parser, limits)) return refusal;
  size_t lengths = 0;
  size_t num_codings = 0;  // of every Transfer-Encoding field (a field may list several)
  std::string_view unknown;  // the first coding other than chunked
  for (const auto& f : head.base()) {
    if (f.name() == bhttp::field::content_length) ++lengths;
    if (f.name() != bhttp::field::transfer_encoding) continue;
    std::string_view list = f.value();
    while (true) {
      const size_t comma = list.find(',');
      std::string_view v = list.substr(0, comma);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      ++num_codings;
      if (unknown.empty() && !boost::beast::iequals(v, "chunked")) unknown = v.empty() ? "''" : v;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  // Beast refuses two Content-Length values that differ. A length beside a Transfer-Encoding is
  // refused here: a proxy in front could frame the body differently (request smuggling).
  if (lengths > 0 && num_codings > 0) {
    return Refusal{400, "a request may not carry both Content-Length and Transfer-Encoding"};
  }
  // No coding but chunked is decoded here: any other is 501 (RFC 9112, 6.1), and the connection
  // closes, since the body's end is then unknown.
  if (!unknown.empty()) {
    return Refusal{501, fmt::format("transfer coding '{}' is not implemented: send the body with "
                                    "Content-Length or 'Transfer-Encoding: chunked' alone",
                                    unknown)};
  }
  // Only chunked, then exactly once (the parser's flag says Beast framed the body with it).
  if (num_codings > 1 || (num_codings == 1 && !parser.chunked())) {
    return Refusal{400, "invalid Transfer-Encoding: 'chunked' may be applied only once"};
  }
  if (head.method() == bhttp::verb::post && lengths == 0 && !parser.chunked()) {
    return Refusal{411, "a POST needs a Content-Length header (or a chunked body)"};
  }
  return std::nullopt;
}

std::optional<Refusal> CheckFieldCount(const RequestParser& parser, const Limits& limits) {
  const auto& fields = parser.get().base();
  if (std::distance(fields.begin(), fields.end()) > limits.max_header_fields) {
    return Refusal{431, fmt::format("the request has more than {} header fields (a chunked "
                                    "body's trailers count too)",
                                    limits.max_header_fields)};
  }
  return std::nullopt;
}

Request ToRequest(RequestParser& parser) {
  auto& msg = parser.get();
  Request r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.path = r.target.substr(0, r.target.find('?'));
  r.version = static_cast<int>(msg.version());
  r.headers.reserve(16);
  for (const auto& f : msg.base()) {
    r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  if (parser.is_done()) r.body = std::move(msg.body());
  return r;
}

bool ExpectsContinue(const RequestParser& parser) {
  const auto& msg = parser.get();
  const auto it = msg.find(bhttp::field::expect);
  if (it == msg.end()) return false;
  const std::string_view v = it->value();
  return boost::beast::iequals(v, "100-continue");
}

ParseOutcome ParseStream(std::string_view bytes, const Limits& limits) {
  ParseOutcome out;
  while (!bytes.empty()) {
    RequestParser parser;
    ConfigureParser(parser, limits);
    boost::beast::error_code ec;
    bool head_checked = false;
    while (!parser.is_done()) {
      const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
      bytes.remove_prefix(used);
      if (ec == bhttp::error::need_more) {
        if (used == 0 || bytes.empty()) {
          out.incomplete = true;
          return out;
        }
        ec = {};
        continue;
      }
      if (ec) {
        out.refusal = RefusalFor(ec);
        return out;
      }
      if (parser.is_header_done() && !head_checked) {
        head_checked = true;
        if (auto refusal = CheckHead(parser, limits)) {
          out.refusal = std::move(refusal);
          return out;
        }
      }
      if (used == 0 && !parser.is_done()) {
        out.incomplete = true;
        return out;
      }
    }
    std::optional<Refusal> refusal = head_checked ? std::nullopt : CheckHead(parser, limits);
    if (!refusal) refusal = CheckFieldCount(parser, limits);
    if (refusal) {
      out.refusal = std::move(refusal);
      return out;
    }
    out.requests.push_back(ToRequest(parser));
  }
  return out;
}

}  // namespace kvserve::http
