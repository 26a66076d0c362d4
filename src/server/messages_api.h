// POST /v1/messages: Anthropic's Messages API over the chat generation path. Parses the body
// with anthropic_codec.h, starts the generation through the EngineBridge, and answers one
// message or its event stream; every error is in Anthropic's shape.
//
// Contract: ServeMessages runs on an HTTP worker thread for the whole request (a stream holds
// the thread). It follows the OpenAI routes' rules: a client that goes away is noticed within
// kPollEvery and its generation cancelled; an idle stream gets `event: ping` every
// kKeepAliveEvery; a response that reaches --max-response-bytes ends with an error (an error
// event once streaming).
#pragma once

#include <string>
#include <string_view>

#include "http/message.h"
#include "http/server.h"
#include "server/engine_bridge.h"

namespace kvserve {

inline constexpr std::string_view kMessagesPath = "/v1/messages";

// An error answer in Anthropic's shape ({"type": "error", "error": {"type", "message"}}), with
// Retry-After on a 503.
http::Response MessagesErrorResponse(const ApiError& error);

// `tenant` is who sent it (HttpServer's digest of the API key; "" without keys): tenants never
// share cached KV.
void ServeMessages(EngineBridge& bridge, const std::string& body_text, const std::string& tenant,
                   http::Exchange& ex);

}  // namespace kvserve
