// How the HTTP layer reads a request: Beast's parser under kvserve's limits, the checks on a
// parsed head (framing, header count), and the answer to every way a request can be malformed.
// The server uses these while reading from a socket; ParseStream runs the same steps over a
// byte string, for the fuzzer and the tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http.hpp>

#include "http/message.h"

namespace kvserve::http {

// A request that is not served: its status (400, 408, 411, 413, 431, 501, ...) and why.
struct Refusal {
  int status = 400;
  std::string message;
};

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

void ConfigureParser(RequestParser& parser, const Limits& limits);
// The answer to an error of Beast's parser while reading a head or a body.
Refusal RefusalFor(const boost::beast::error_code& ec);
// Checks a parsed head: its framing (RFC 9112 section 6.3: one Content-Length or a chunked body,
// never both, and a POST must declare one; a transfer coding other than chunked is 501) and its
// number of header fields.
std::optional<Refusal> CheckHead(const RequestParser& parser, const Limits& limits);
// Checks the number of header fields: CheckHead calls it on the head, and it is called again
// once a chunked body has been read, since Beast adds the body's trailer fields to the same list.
std::optional<Refusal> CheckFieldCount(const RequestParser& parser, const Limits& limits);
// The head (and the body, moved out, when it has been read) as the layer's Request.
Request ToRequest(RequestParser& parser);
// Whether the head asks for "100 Continue" before its body is sent.
bool ExpectsContinue(const RequestParser& parser);

// Feeds `bytes` (one connection's input) through the same parser set-up and checks as the
// server: the requests it would serve, in order, and the refusal that would end the connection.
// `incomplete` when the bytes end inside a request.
struct ParseOutcome {
  std::vector<Request> requests;
  std::optional<Refusal> refusal;
  bool incomplete = false;
};
ParseOutcome ParseStream(std::string_view bytes, const Limits& limits);

}  // namespace kvserve::http
