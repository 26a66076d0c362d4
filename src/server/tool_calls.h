// Tool calls in generated text: parsing a chat family's call syntax (ToolFormat) out of what
// the model wrote, for message.tool_calls, and holding back streamed text that may be a call.
//
//   Hermes:  [content] <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> [\n<tool_call>...]
//   Llama 3: {"name": N, "parameters": {...}}   (the whole turn; "arguments" is accepted too)
//
// Contract: a text parses as calls only when every call is well-formed JSON naming one of the
// request's tools and nothing but whitespace follows the last one; otherwise it is plain
// content, unchanged. Arguments come back as compact JSON text in the order the model wrote
// them. Not thread-safe (one per choice).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_codec.h"
#include "tokenizer/chat_template.h"

namespace kvserve {

struct ParsedToolCalls {
  std::string content;  // the text before the first call, trailing whitespace removed
  std::vector<ToolCallOut> calls;
};

// nullopt when `text` holds no well-formed calls (see the contract). Ids are left empty.
std::optional<ParsedToolCalls> ParseToolCallText(ToolFormat format, std::string_view text,
                                                 const std::vector<std::string>& tool_names);

// Streams a choice's text while holding back what may become a tool call: Hermes text from a
// "<tool_call>" (or a partial one at the end, or trailing whitespace) on; Llama 3 the whole
// turn once it starts with '{'.
class ToolCallStream {
 public:
  ToolCallStream(ToolFormat format, std::vector<std::string> tool_names);
  // Appends generated text; returns the part that is certainly content.
  std::string Push(std::string_view text);
  // At the end: the calls (with fresh ids) and the content not yet returned, or, when the held
  // text is no call after all, that text as content.
  ParsedToolCalls Finish();

 private:
  ToolFormat format_;
  std::vector<std::string> names_;
  std::string all_;     // everything generated
  size_t emitted_ = 0;  // bytes of all_ returned as content
};

}  // namespace kvserve
