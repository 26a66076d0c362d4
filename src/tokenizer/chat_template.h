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
// Text printed for bos/eos comes from the arguments of Render(): pass "" for bos_text if the
// tokenizer adds BOS itself, so that it is not doubled.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "util/strong_id.h"

namespace kvserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"; others only where the family allows
  std::string content;
};

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

  // REQUIRES nothing; errors: no messages, a role the family does not support, a system
  // message that is not first (for families that fold it), broken alternation.
  Result<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             std::string_view bos_text, std::string_view eos_text) const;

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
                                        bool add_generation_prompt);

}  // namespace kvserve
