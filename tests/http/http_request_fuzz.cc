// libFuzzer entry point for the HTTP request reader: the input is one connection's bytes, fed
// through ParseStream (the server's parser set-up and head checks) under small limits, which the
// fuzzer can reach with short inputs, and under the defaults. A crash, a sanitizer report or a
// broken invariant (a trap) means the server could answer or frame a request it should refuse.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/request.h"

namespace {

using kvserve::http::Limits;
using kvserve::http::ParseOutcome;
using kvserve::http::Request;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
           return lower(x) == lower(y);
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn on each coding of a Transfer-Encoding list ("gzip, chunked": "gzip", "chunked").
template <typename Fn>
void ForEachCoding(std::string_view value, Fn fn) {
  for (size_t comma; (comma = value.find(',')) != std::string_view::npos;) {
    fn(Trim(value.substr(0, comma)));
    value.remove_prefix(comma + 1);
  }
  fn(Trim(value));
}

void CheckRequest(const Request& r, const Limits& limits, size_t input_size) {
  Require(!r.method.empty());
  Require(r.target.compare(0, r.path.size(), r.path) == 0);
  Require(r.path.find('?') == std::string::npos);
  Require(r.version == 10 || r.version == 11);  // anything else is a 505
  // Every field the request carries, the trailers of a chunked body included: they end up in
  // the same headers as the head's.
  Require(r.headers.size() <= static_cast<size_t>(limits.max_header_fields));
  Require(r.body.size() <= limits.max_body_bytes);
  Require(r.body.size() <= input_size);

  // Framing (RFC 9112 section 6.3): a served request has one unambiguous body length, or a
  // proxy in front of the server could split the stream elsewhere (request smuggling).
  size_t transfer_encodings = 0;
  size_t codings = 0;
  for (const auto& [name, value] : r.headers) {
    if (IEquals(name, "Content-Length")) {
      // Beast lets repeats of one value through; each must then agree with the body read.
      const std::string_view t = Trim(value);
      if (!t.empty() && t.size() <= 18 &&
          std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        Require(std::stoull(std::string(t)) == r.body.size());
      }
    }
    if (IEquals(name, "Transfer-Encoding")) {
      ++transfer_encodings;
      // Only chunked is decoded: a request with any other coding is refused (501, or 400 where
      // the final coding is not chunked and the length is unknowable).
      ForEachCoding(value, [&](std::string_view coding) {
        Require(IEquals(coding, "chunked"));
        ++codings;
      });
    }
  }
  Require(codings <= 1);  // chunked applied twice is refused
  const bool has_length = kvserve::http::CountHeaders(r.headers, "Content-Length") > 0;
  Require(!(has_length && transfer_encodings > 0));
  if (r.method == "POST") Require(has_length || transfer_encodings > 0);
}

void Check(const ParseOutcome& out, const Limits& limits, size_t input_size) {
  Require(!(out.refusal && out.incomplete));
  if (out.refusal) {
    const int s = out.refusal->status;
    Require(s == 400 || s == 408 || s == 411 || s == 413 || s == 431 || s == 501 || s == 505);
    Require(!out.refusal->message.empty());
  }
  size_t bodies = 0;
  for (const Request& r : out.requests) {
    CheckRequest(r, limits, input_size);
    bodies += r.body.size();
  }
  Require(bodies <= input_size);
}

bool SameRequest(const Request& a, const Request& b) {
  return a.method == b.method && a.target == b.target && a.version == b.version &&
         a.headers == b.headers && a.body == b.body;
}

// The server reads a connection in whatever pieces the network delivers, so a prefix of the
// bytes must yield a prefix of the same requests, and a refusal seen early must stay one.
void CheckPrefix(std::string_view bytes, size_t cut, const Limits& limits,
                 const ParseOutcome& whole) {
  const ParseOutcome part = ParseStream(bytes.substr(0, cut), limits);
  Check(part, limits, cut);
  Require(part.requests.size() <= whole.requests.size());
  for (size_t i = 0; i < part.requests.size(); ++i) {
    Require(SameRequest(part.requests[i], whole.requests[i]));
  }
  if (part.refusal) {
    Require(whole.refusal.has_value() && whole.refusal->status == part.refusal->status);
    Require(part.requests.size() == whole.requests.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  Limits small;
  small.max_header_bytes = 4096;
  small.max_header_fields = 32;
  small.max_body_bytes = 65536;
  const ParseOutcome outcome = ParseStream(bytes, small);
  Check(outcome, small, size);
  // The cut comes from the input so the fuzzer can steer it anywhere in the stream.
  if (size > 1) CheckPrefix(bytes, size_t{data[size - 1]} * size / 256, small, outcome);

  const Limits defaults;
  Check(ParseStream(bytes, defaults), defaults, size);
  return 0;
}
