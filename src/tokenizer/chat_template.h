// ChatTemplate: turns an OpenAI-style message list into the prompt text a chat model was
// trained on, for the common template families, without a Jinja interpreter.
//
// Contract: an immutable value (cheap to copy, thread-safe to share). Each family is one row
// of a table in chat_template.cc: turn prefixes/suffixes per role, how the system message is
// placed, which roles are trimmed, the generation prompt. Render() reproduces what the real
// Jinja template renders under Hugging Face's settings (trim_blocks, lstrip_blocks) for
// system/user/assistant conversations; tests pin this against real template sources.
//
// Deliberate differences from the Jinja originals (each where the original raises or ignores):
// - gemma and mistral-legacy templates reject a system message; we fold it into the first user
//   turn followed by "\n\n" (as Gemma 3 and Mistral's later official templates do).
// - Roles a family does not know are an InvalidArgument at render time (the original templates
//   raise or silently drop them); chatml, llama3 and phi3 accept any role name.
// - Families whose template requires user/assistant alternation (after one leading system
//   message) return InvalidArgument when it is broken.
// - Trimming ("strip()"/"| trim") removes ASCII whitespace only.
// - harmony (gpt-oss) drops a system/developer message that is not first; we refuse it. Its
//   tool rendering (TypeScript-like namespaces) is not reproduced: tools are refused there.
// Text printed for bos/eos comes from the arguments of Render(): pass "" for bos_text if the
// tokenizer adds BOS itself, so that it is not doubled.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "util/strong_id.h"

namespace kvserve {

// A function call an assistant turn made (OpenAI's message.tool_calls[i]).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as OpenAI carries it
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"; others where the family allows
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant turns that called tools
  std::string tool_call_id;          // role "tool": the call this is the result of
};

// What a template prints besides the messages: the Jinja original's strftime_now() and keyword
// arguments. Families that print neither ignore them.
struct ChatRenderOptions {
  std::string date;              // "YYYY-MM-DD"; empty: today's date in UTC
  std::string reasoning_effort;  // "low", "medium" or "high"; empty: the family's default
};

// "YYYY-MM-DD" of a Unix time in milliseconds, in UTC (strftime_now("%Y-%m-%d") on a UTC host).
std::string UtcDate(int64_t unix_ms);

// How a family's model writes its reply.
//   kPlain: the reply is the text.
//   kHarmony: gpt-oss: messages on channels, the reasoning on "analysis" and the answer on
//     "final" (server/harmony.h splits them).
enum class ReplyFormat { kPlain, kHarmony };

// How a template family writes tool definitions and calls (OpenAI `tools`).
//   kHermes: Qwen2.5/Qwen3 and Hermes models: tools as JSON lines in <tools></tools> in the
//     system turn; a call is <tool_call>\n{"name": N, "arguments": A}\n</tool_call>; results go
//     back as <tool_response> blocks in a user turn.
//   kLlama3Json: Llama 3.1-3.3: tools in the first user turn (JSON, indent 4); a call is the
//     whole assistant turn, {"name": N, "parameters": A}; results are "ipython" turns.
enum class ToolFormat { kNone, kHermes, kLlama3Json };
const char* ToolFormatName(ToolFormat f);

// Python's json.dumps as chat templates' `tojson` prints it: ", " and ": " separators, or with
// indent > 0 one member per line; non-ASCII text as is.
std::string PyJsonDumps(const nlohmann::ordered_json& value, int indent = 0);

struct ChatTemplateFamily;  // one row of the table in chat_template.cc

class ChatTemplate {
 public:
  // --chat-template NAME. Unknown -> InvalidArgument listing the known names.
  static Result<ChatTemplate> FromName(std::string_view name);
  // Recognises a GGUF tokenizer.chat_template / tokenizer_config.json chat_template of a known
  // family by distinctive substrings. Unrecognised -> Unimplemented naming the known names.
  static Result<ChatTemplate> Detect(std::string_view jinja_source);
  static std::vector<std::string> KnownNames();

  const std::string& name() const { return name_; }
  ToolFormat tool_format() const;
  ReplyFormat reply_format() const;

  // REQUIRES nothing; errors: no messages, a role the family does not support, a system
  // message that is not first (for families that fold it or take it only first), broken
  // alternation.
  Result<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             std::string_view bos_text, std::string_view eos_text,
                             const ChatRenderOptions& options = {}) const;
  // With tool definitions (each {"type": "function", "function": {...}} as the client sent
  // it), in the family's tool format. Errors: tools given to a family without a tool format;
  // Llama 3: no first user message, or more than one call in an assistant turn.
  // Messages with tool_calls or role "tool" render in the tool format even without tools.
  Result<std::string> Render(std::span<const ChatMessage> messages,
                             std::span<const nlohmann::ordered_json> tools,
                             bool add_generation_prompt, std::string_view bos_text,
                             std::string_view eos_text,
                             const ChatRenderOptions& options = {}) const;

 private:
  explicit ChatTemplate(const ChatTemplateFamily* family);

  const ChatTemplateFamily* family_;  // points into a static table
  std::string name_;
};

class Tokenizer;

// Renders `messages` with `tmpl` (the tokenizer's BOS/EOS texts filled in) and tokenizes the
// text with special tokens parsed; BOS is added only when the template did not write it.
Result<std::vector<TokenId>> EncodeChat(const ChatTemplate& tmpl, const Tokenizer& tok,
                                        std::span<const ChatMessage> messages,
                                        bool add_generation_prompt,
                                        std::span<const nlohmann::ordered_json> tools = {},
                                        const ChatRenderOptions& options = {});

}  // namespace kvserve
