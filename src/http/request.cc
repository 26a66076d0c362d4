#include "http/request.h"

#include <fmt/format.h>

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
  if (ec == bhttp::error::bad_version) return {505, "HTTP version not supported"};
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
  int fields = 0;
  size_t lengths = 0;
  bool transfer_encoding = false;
  for (const auto& f : head.base()) {
    ++fields;
    if (f.name() == bhttp::field::content_length) ++lengths;
    if (f.name() == bhttp::field::transfer_encoding) transfer_encoding = true;
  }
  if (fields > limits.max_header_fields) {
    return Refusal{431, fmt::format("the request has more than {} header fields",
                                    limits.max_header_fields)};
  }
  // Beast already refuses two Content-Length values that differ and a Transfer-Encoding other
  // than chunked; a length beside a chunked body is refused here, since a proxy in front could
  // frame the body by the other one (request smuggling).
  if (lengths > 0 && transfer_encoding) {
    return Refusal{400, "a request may not carry both Content-Length and Transfer-Encoding"};
  }
  if (head.method() == bhttp::verb::post && lengths == 0 && !parser.chunked()) {
    return Refusal{411, "a POST needs a Content-Length header (or a chunked body)"};
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
  return v.size() == 12 && boost::beast::iequals(v, "100-continue");
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
    if (!head_checked) {
      if (auto refusal = CheckHead(parser, limits)) {
        out.refusal = std::move(refusal);
        return out;
      }
    }
    out.requests.push_back(ToRequest(parser));
  }
  return out;
}

}  // namespace kvserve::http
