#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

// How a family places the system message.
enum class SystemMode {
  kOwnTurn,        // system messages are turns with their own format
  kFoldFirstUser,  // a leading system message is prepended to the first user turn
  kFoldLastUser,   // ... to the last message if it is a user turn, else dropped (Mistral v3)
  kLeadingTurn,    // only a leading system message, as a turn of its own that an empty one
                   // skips (harmony's developer message)
};

bool Folds(SystemMode mode) {
  return mode == SystemMode::kFoldFirstUser || mode == SystemMode::kFoldLastUser;
}

// One turn: prefix + content + suffix. Prefix/suffix may contain {bos}, {eos} and {role}; the
// family's `begin` also {date} and {reasoning_effort} (ChatRenderOptions).
struct TurnFormat {
  std::string_view prefix;
  std::string_view suffix;
  bool trim = false;  // the template strips the content ("strip()" / "| trim")
};

}  // namespace

// One template family. Designated initialisers in the table below name every field.
struct ChatTemplateFamily {
  std::string_view name;
  std::array<std::string_view, 3> detect_all;   // all must occur in the Jinja source
  std::array<std::string_view, 3> detect_none;  // none may occur
  std::string_view begin;                       // printed once before the first turn
  TurnFormat system;
  TurnFormat user;
  TurnFormat assistant;
  TurnFormat other;          // used for any other role when other_roles
  bool other_roles = false;  // the template prints any role name
  SystemMode system_mode = SystemMode::kOwnTurn;
  std::string_view fold_prefix;  // around the system text when folded into a user turn
  std::string_view fold_suffix;
  bool fold_inside_trim = false;    // folded text is part of the trimmed content
  std::string_view default_system;  // kOwnTurn: system text used when there is none
  bool alternate = false;  // user/assistant must alternate after an optional leading system
  std::string_view generation_prompt;
  std::string_view end_without_generation;
  // Replaces assistant.suffix on a last assistant turn without generation prompt (harmony ends
  // a finished reply with <|return|>, an earlier one with <|end|>).
  std::string_view last_assistant_suffix;
  std::string_view default_reasoning_effort;  // {reasoning_effort} when the request has none
  ToolFormat tool_format = ToolFormat::kNone;
  ReplyFormat reply_format = ReplyFormat::kPlain;
};

namespace {

constexpr TurnFormat kChatml{"<|im_start|>{role}\n", "<|im_end|>\n"};
constexpr TurnFormat kLlama3{"<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", true};
constexpr TurnFormat kPhi3{"<|{role}|>\n", "<|end|>\n"};
constexpr TurnFormat kZephyr{"<|{role}|>\n", "{eos}\n"};

// gpt-oss's system message as its template writes it without tools or builtin tools.
constexpr std::string_view kHarmonySystem =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: {reasoning_effort}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.<|end|>";

constexpr std::string_view kDeepseekDefaultSystem =
    "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by "
    "Deepseek Company, and you only answer questions related to computer science. For "
    "politically sensitive questions, security and privacy issues, and other non-computer "
    "science questions, you will refuse to answer\n";

// NOTE: Detect() takes the first row whose markers match, so more specific rows come first
// (every Mistral variant contains "[INST]"; llama2 and mistral-legacy are the fallbacks).
constexpr ChatTemplateFamily kFamilies[] = {
    {// Qwen 1.5/2/2.5/3 (plain), SmolLM, OpenHermes, Yi and many more.
     .name = "chatml",
     .detect_all = {"<|im_start|>"},
     .detect_none = {"<|im_sep|>", "<end_of_utterance>"},
     .system = kChatml,
     .user = kChatml,
     .assistant = kChatml,
     .other = kChatml,
     .other_roles = true,
     .generation_prompt = "<|im_start|>assistant\n",
     .tool_format = ToolFormat::kHermes},
    {// gpt-oss (OpenAI's harmony format): a fixed system message, the OpenAI system/developer
     // message as the developer turn, past answers on the final channel.
     .name = "harmony",
     .detect_all = {"<|start|>", "<|channel|>", "<|message|>"},
     .begin = kHarmonySystem,
     .system = {"<|start|>developer<|message|># Instructions\n\n", "\n\n<|end|>"},
     .user = {"<|start|>user<|message|>", "<|end|>"},
     .assistant = {"<|start|>assistant<|channel|>final<|message|>", "<|end|>"},
     .system_mode = SystemMode::kLeadingTurn,
     .generation_prompt = "<|start|>assistant",
     .last_assistant_suffix = "<|return|>",
     .default_reasoning_effort = "medium",
     .reply_format = ReplyFormat::kHarmony},
    {// Mistral-Large-Instruct-2411 ("v7").
     .name = "mistral-v7",
     .detect_all = {"[SYSTEM_PROMPT] ", "[INST]"},
     .begin = "{bos}",
     .system = {"[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]"},
     .user = {"[INST] ", "[/INST]"},
     .assistant = {" ", "{eos}"}},
    {// Mistral-7B-Instruct-v0.3, Mistral-Large-2407 ("v3"): system goes into the LAST user turn.
     .name = "mistral-v3",
     .detect_all = {"[AVAILABLE_TOOLS]", "\"[INST] \""},
     .begin = "{bos}",
     .user = {"[INST] ", "[/INST]"},
     .assistant = {" ", "{eos}", true},
     .system_mode = SystemMode::kFoldLastUser,
     .fold_suffix = "\n\n",
     .alternate = true},
    {// Mistral-Nemo-Instruct-2407 ("v3-tekken"): no spaces around [INST].
     .name = "mistral-v3-tekken",
     .detect_all = {"[AVAILABLE_TOOLS]", "\"[INST]\""},
     .begin = "{bos}",
     .user = {"[INST]", "[/INST]"},
     .assistant = {"", "{eos}"},
     .system_mode = SystemMode::kFoldLastUser,
     .fold_suffix = "\n\n",
     .alternate = true},
    {// Mistral-7B-Instruct v0.1/v0.2 with Mistral's official "v1" template.
     .name = "mistral-v1",
     .detect_all = {" [INST] ", "system_message"},
     .begin = "{bos}",
     .user = {" [INST] ", " [/INST]"},
     .assistant = {" ", "{eos}"},
     .system_mode = SystemMode::kFoldFirstUser,
     .fold_suffix = "\n\n",
     .alternate = true},
    {// Llama-2-*-chat: <<SYS>> block inside the first [INST], BOS before every [INST].
     .name = "llama2",
     .detect_all = {"[INST]", "<<SYS>>"},
     .user = {"{bos}[INST] ", " [/INST]", true},
     .assistant = {" ", " {eos}", true},
     .system_mode = SystemMode::kFoldFirstUser,
     .fold_prefix = "<<SYS>>\n",
     .fold_suffix = "\n<</SYS>>\n\n",
     .fold_inside_trim = true,
     .alternate = true},
    {// Mistral-7B-Instruct v0.1/v0.2 original template (no system role; we fold it).
     .name = "mistral-legacy",
     .detect_all = {"[INST]"},
     .detect_none = {"<<SYS>>", "[SYSTEM_PROMPT]", "system_message"},
     .begin = "{bos}",
     .user = {"[INST] ", " [/INST]"},
     .assistant = {"", "{eos}"},
     .system_mode = SystemMode::kFoldFirstUser,
     .fold_suffix = "\n\n",
     .alternate = true},
    {// Llama 3 / 3.1 / 3.2 / 3.3 Instruct (3.1+ date header and tools not reproduced).
     .name = "llama3",
     .detect_all = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
     .begin = "{bos}",
     .system = kLlama3,
     .user = kLlama3,
     .assistant = kLlama3,
     .other = kLlama3,
     .other_roles = true,
     .generation_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n",
     .tool_format = ToolFormat::kLlama3Json},
    {// Gemma 1/2/3 instruct: assistant is "model", system folded into the first user turn.
     .name = "gemma",
     .detect_all = {"<start_of_turn>"},
     .begin = "{bos}",
     .user = {"<start_of_turn>user\n", "<end_of_turn>\n", true},
     .assistant = {"<start_of_turn>model\n", "<end_of_turn>\n", true},
     .system_mode = SystemMode::kFoldFirstUser,
     .fold_suffix = "\n\n",
     .alternate = true,
     .generation_prompt = "<start_of_turn>model\n"},
    {// Phi-3 / Phi-3.5 (small/vision/3.5-mini form; Phi-3-mini's own template drops system).
     .name = "phi3",
     .detect_all = {"<|assistant|>", "<|end|>"},
     .begin = "{bos}",
     .system = kPhi3,
     .user = kPhi3,
     .assistant = kPhi3,
     .other = kPhi3,
     .other_roles = true,
     .generation_prompt = "<|assistant|>\n",
     .end_without_generation = "{eos}"},
    {// HuggingFaceH4/zephyr-7b-beta and its many fine-tunes.
     .name = "zephyr",
     .detect_all = {"<|user|>", "<|assistant|>", "eos_token"},
     .detect_none = {"<|end|>"},
     .system = kZephyr,
     .user = kZephyr,
     .assistant = kZephyr,
     .generation_prompt = "<|assistant|>\n"},
    {// CohereForAI c4ai-command-r / command-r-plus (default template, no tools/RAG).
     .name = "command-r",
     .detect_all = {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"},
     .begin = "{bos}",
     .system = {"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
     .user = {"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
     .assistant = {"<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
     .alternate = true,
     .generation_prompt = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {// deepseek-coder-*-instruct (prints its default system prompt when there is none).
     .name = "deepseek",
     .detect_all = {"### Instruction:", "<|EOT|>"},
     .begin = "{bos}",
     .system = {"", ""},
     .user = {"### Instruction:\n", "\n"},
     .assistant = {"### Response:\n", "\n<|EOT|>\n"},
     .default_system = kDeepseekDefaultSystem,
     .generation_prompt = "### Response:\n"},
    {// Orca-Vicuna.
     .name = "vicuna-orca",
     .detect_all = {"USER: ", "ASSISTANT: ", "SYSTEM: "},
     .system = {"SYSTEM: ", "\n"},
     .user = {"USER: ", "\n"},
     .assistant = {"ASSISTANT: ", "</s>\n"},
     .generation_prompt = "ASSISTANT:"},
    {// Vicuna v1.1 (the template hard-codes "</s>", not eos_token).
     .name = "vicuna",
     .detect_all = {"USER: ", "ASSISTANT: "},
     .system = {"", "\n\n"},
     .user = {"USER: ", "\n"},
     .assistant = {"ASSISTANT: ", "</s>\n"},
     .generation_prompt = "ASSISTANT:"},
};

std::string KnownNamesList() {
  std::string out;
  for (const ChatTemplateFamily& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

bool Matches(const ChatTemplateFamily& f, std::string_view source) {
  for (std::string_view marker : f.detect_all) {
    if (!marker.empty() && source.find(marker) == std::string_view::npos) return false;
  }
  for (std::string_view marker : f.detect_none) {
    if (!marker.empty() && source.find(marker) != std::string_view::npos) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// Expands the placeholders of a table string: {bos}, {eos}, {role}, {date}, {reasoning_effort}.
struct Expander {
  std::string_view bos;
  std::string_view eos;
  std::string_view date;
  std::string_view reasoning_effort;

  void Append(std::string_view text, std::string_view role, std::string* out) const {
    const std::pair<std::string_view, std::string_view> fields[] = {
        {"{bos}", bos},
        {"{eos}", eos},
        {"{role}", role},
        {"{date}", date},
        {"{reasoning_effort}", reasoning_effort}};
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t open = text.find('{', pos);
      if (open == std::string_view::npos) break;
      out->append(text.substr(pos, open - pos));
      const std::string_view rest = text.substr(open);
      const auto* field = std::find_if(std::begin(fields), std::end(fields),
                                       [&](const auto& f) { return rest.starts_with(f.first); });
      if (field != std::end(fields)) {
        out->append(field->second);
        pos = open + field->first.size();
      } else {
        out->push_back('{');
        pos = open + 1;
      }
    }
    out->append(text.substr(std::min(pos, text.size())));
  }
};

std::string UtcToday() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return UtcDate(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
}

const TurnFormat* FormatFor(const ChatTemplateFamily& f, std::string_view role) {
  if (role == "user") return &f.user;
  if (role == "assistant") return &f.assistant;
  if (role == "system" && !Folds(f.system_mode)) return &f.system;
  if (role != "system" && f.other_roles) return &f.other;
  return nullptr;
}

// Checks roles, system placement and alternation. Returns the index of the first message that
// is rendered as a turn of its own: 1 when a leading system message gets folded, else 0.
Result<size_t> CheckConversation(const ChatTemplateFamily& f,
                                 std::span<const ChatMessage> messages) {
  if (messages.empty()) return InvalidArgument("chat has no messages");
  const bool leading_system = messages[0].role == "system";
  const bool system_first_only = f.system_mode != SystemMode::kOwnTurn || f.alternate;
  const size_t alternation_start = leading_system ? 1 : 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "system" && system_first_only && i != 0) {
      return InvalidArgument(fmt::format(
          "message {}: chat template '{}' allows a system message only as the first message", i,
          f.name));
    }
    if (role != "system" && FormatFor(f, role) == nullptr) {
      return InvalidArgument(fmt::format(
          "message {}: role '{}' is not supported by chat template '{}' (use system, user or "
          "assistant)",
          i, role, f.name));
    }
    if (f.alternate && i >= alternation_start) {
      const char* want = (i - alternation_start) % 2 == 0 ? "user" : "assistant";
      if (role != want) {
        return InvalidArgument(fmt::format(
            "message {}: chat template '{}' needs user/assistant turns to alternate after an "
            "optional system message, starting with user; got '{}' where '{}' belongs",
            i, f.name, role, want));
      }
    }
  }
  return leading_system && Folds(f.system_mode) ? size_t{1} : size_t{0};
}

}  // namespace

ChatTemplate::ChatTemplate(const ChatTemplateFamily* family)
    : family_(family), name_(family->name) {}

std::vector<std::string> ChatTemplate::KnownNames() {
  std::vector<std::string> names;
  for (const ChatTemplateFamily& f : kFamilies) names.emplace_back(f.name);
  return names;
}

Result<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  for (const ChatTemplateFamily& f : kFamilies) {
    if (f.name == name) return ChatTemplate(&f);
  }
  return InvalidArgument(
      fmt::format("unknown chat template '{}' (known: {})", name, KnownNamesList()));
}

Result<ChatTemplate> ChatTemplate::Detect(std::string_view jinja_source) {
  for (const ChatTemplateFamily& f : kFamilies) {
    if (Matches(f, jinja_source)) return ChatTemplate(&f);
  }
  return Unimplemented(fmt::format(
      "unrecognised chat template in the model file; pass --chat-template NAME (known: {})",
      KnownNamesList()));
}

Result<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                         bool add_generation_prompt, std::string_view bos_text,
                                         std::string_view eos_text,
                                         const ChatRenderOptions& options) const {
  const ChatTemplateFamily& f = *family_;
  KV_ASSIGN_OR_RETURN(const size_t start, CheckConversation(f, messages));
  const std::string_view system_text = start == 1 ? messages[0].content : std::string_view();
  const std::string date = options.date.empty() ? UtcToday() : options.date;
  const Expander expand{
      bos_text, eos_text, date,
      options.reasoning_effort.empty() ? f.default_reasoning_effort : options.reasoning_effort};
  std::string out;
  expand.Append(f.begin, "", &out);
  if (!f.default_system.empty()) {
    bool has_system = false;
    for (const ChatMessage& m : messages) has_system |= m.role == "system";
    if (!has_system) {
      expand.Append(f.system.prefix, "system", &out);
      out += f.default_system;
      expand.Append(f.system.suffix, "system", &out);
    }
  }
  bool folded = start == 0;
  for (size_t i = start; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" && f.system_mode == SystemMode::kLeadingTurn && m.content.empty()) {
      continue;
    }
    const TurnFormat& turn = *FormatFor(f, m.role);
    const bool fold = !folded && m.role == "user" &&
                      (f.system_mode == SystemMode::kFoldFirstUser || i + 1 == messages.size());
    std::string body;
    if (fold) {
      folded = true;
      body = fmt::format("{}{}{}", f.fold_prefix, system_text, f.fold_suffix);
      if (!f.fold_inside_trim && turn.trim) {
        body += Trim(m.content);
      } else {
        body += m.content;
        if (turn.trim) body = std::string(Trim(body));
      }
    } else {
      body = turn.trim ? Trim(m.content) : std::string_view(m.content);
    }
    const bool ends_reply = m.role == "assistant" && i + 1 == messages.size() &&
                            !add_generation_prompt && !f.last_assistant_suffix.empty();
    expand.Append(turn.prefix, m.role, &out);
    out += body;
    expand.Append(ends_reply ? f.last_assistant_suffix : turn.suffix, m.role, &out);
  }
  expand.Append(add_generation_prompt ? f.generation_prompt : f.end_without_generation, "", &out);
  return out;
}

std::string UtcDate(int64_t unix_ms) {
  using namespace std::chrono;
  const year_month_day day(floor<days>(sys_time<milliseconds>(milliseconds(unix_ms))));
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(day.year()),
                     static_cast<unsigned>(day.month()), static_cast<unsigned>(day.day()));
}

const char* ToolFormatName(ToolFormat f) {
  switch (f) {
    case ToolFormat::kNone: return "none";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3Json: return "llama3-json";
  }
  return "none";
}

namespace {

void AppendPyJson(const nlohmann::ordered_json& v, int indent, int level, std::string* out) {
  const auto newline = [&](int l) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * l), ' ');
  };
  if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    out->push_back(object ? '{' : '[');
    if (!v.empty()) {
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out->append(indent > 0 ? "," : ", ");
        first = false;
        if (indent > 0) newline(level + 1);
        if (object) {
          out->append(nlohmann::ordered_json(it.key()).dump(
              -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
          out->append(": ");
        }
        AppendPyJson(*it, indent, level + 1, out);
      }
      if (indent > 0) newline(level);
    }
    out->push_back(object ? '}' : ']');
    return;
  }
  out->append(v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

bool UsesTools(std::span<const ChatMessage> messages,
               std::span<const nlohmann::ordered_json> tools) {
  if (!tools.empty()) return true;
  for (const ChatMessage& m : messages) {
    if (!m.tool_calls.empty() || m.role == "tool") return true;
  }
  return false;
}

// Qwen2.5/Qwen3's template (the Hermes tool format on chatml).
Result<std::string> RenderHermes(std::span<const ChatMessage> messages,
                                 std::span<const nlohmann::ordered_json> tools,
                                 bool add_generation_prompt) {
  if (messages.empty()) return InvalidArgument("chat has no messages");
  std::string out;
  size_t start = 0;
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (messages[0].role == "system") {
      out += messages[0].content;
      out += "\n\n";
      start = 1;
    }
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const nlohmann::ordered_json& tool : tools) {
      out += '\n';
      out += PyJsonDumps(tool);
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  }
  for (size_t i = start; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      continue;
    }
    out += "<|im_start|>" + m.role + "\n" + m.content;
    for (size_t c = 0; c < m.tool_calls.size(); ++c) {
      if (c > 0 || !m.content.empty()) out += '\n';
      const ToolCall& call = m.tool_calls[c];
      out += "<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": " + call.arguments +
             "}\n</tool_call>";
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Llama 3.1's template with tools_in_user_message (its default) and no builtin tools.
Result<std::string> RenderLlama3Tools(std::span<const ChatMessage> messages,
                                      std::span<const nlohmann::ordered_json> tools,
                                      bool add_generation_prompt, std::string_view bos) {
  constexpr std::string_view kHeader = "<|start_header_id|>{}<|end_header_id|>\n\n";
  const auto header = [&](std::string_view role) { return fmt::format(kHeader, role); };
  std::string out(bos);
  size_t i = 0;
  std::string_view system;
  if (!messages.empty() && messages[0].role == "system") {
    system = Trim(messages[0].content);
    i = 1;
  }
  out += header("system");
  if (!tools.empty()) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  out += system;
  out += "<|eot_id|>";
  if (!tools.empty()) {
    if (i >= messages.size() || messages[i].role != "user") {
      return InvalidArgument(
          "chat template 'llama3' puts the tools in the first user message, and there is none "
          "after the system message");
    }
    out += header("user");
    out +=
        "Given the following functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
        "Do not use variables.\n\n";
    for (const nlohmann::ordered_json& tool : tools) {
      out += PyJsonDumps(tool, 4);
      out += "\n\n";
    }
    out += Trim(messages[i].content);
    out += "<|eot_id|>";
    ++i;
  }
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" && i > 0) {
      return InvalidArgument(fmt::format(
          "message {}: chat template 'llama3' with tools allows a system message only first", i));
    }
    if (m.role == "tool") {
      // The template writes `content | tojson` for strings (they are iterable in Jinja).
      out += header("ipython") + PyJsonDumps(nlohmann::ordered_json(m.content)) + "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) {
        return InvalidArgument(fmt::format(
            "message {}: chat template 'llama3' supports one tool call per assistant turn, "
            "got {}",
            i, m.tool_calls.size()));
      }
      const ToolCall& call = m.tool_calls[0];
      out += header(m.role) + "{\"name\": \"" + call.name + "\", \"parameters\": " +
             call.arguments + "}<|eot_id|>";
    } else {
      out += header(m.role);
      out += Trim(m.content);
      out += "<|eot_id|>";
    }
  }
  if (add_generation_prompt) out += header("assistant");
  return out;
}

}  // namespace

std::string PyJsonDumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  AppendPyJson(value, indent, 0, &out);
  return out;
}

ToolFormat ChatTemplate::tool_format() const { return family_->tool_format; }
ReplyFormat ChatTemplate::reply_format() const { return family_->reply_format; }

Result<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                         std::span<const nlohmann::ordered_json> tools,
                                         bool add_generation_prompt, std::string_view bos_text,
                                         std::string_view eos_text,
                                         const ChatRenderOptions& options) const {
  if (!UsesTools(messages, tools)) {
    return Render(messages, add_generation_prompt, bos_text, eos_text, options);
  }
  switch (family_->tool_format) {
    case ToolFormat::kHermes:
      return RenderHermes(messages, tools, add_generation_prompt);
    case ToolFormat::kLlama3Json:
      return RenderLlama3Tools(messages, tools, add_generation_prompt, bos_text);
    case ToolFormat::kNone:
      break;
  }
  return InvalidArgument(fmt::format(
      "chat template '{}' defines no tool-call format (tools, tool_calls and role 'tool' work "
      "with chatml, for Qwen and Hermes models, and llama3)",
      name_));
}

Result<std::vector<TokenId>> EncodeChat(const ChatTemplate& tmpl, const Tokenizer& tok,
                                        std::span<const ChatMessage> messages,
                                        bool add_generation_prompt,
                                        std::span<const nlohmann::ordered_json> tools,
                                        const ChatRenderOptions& options) {
  const std::string bos = tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "";
  KV_ASSIGN_OR_RETURN(std::string text,
                      tmpl.Render(messages, tools, add_generation_prompt, bos, eos, options));
  const bool has_bos = !bos.empty() && text.rfind(bos, 0) == 0;
  return tok.Encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

}  // namespace kvserve
