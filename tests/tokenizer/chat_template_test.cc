// Chat templates: each family is detected from its real Jinja source and renders exactly what
// that template renders.
//
// Expected strings: the real templates below rendered with Python jinja2 3.1 under Hugging Face
// apply_chat_template settings (trim_blocks, lstrip_blocks); where llama.cpp's
// tests/test-chat-template.cpp has an expected string for the same template and conversation
// they agree. Exceptions, marked below: gemma (gemma-7b-it) and mistral-legacy raise on a system
// message; there we expect our documented fold "system\n\nfirst user message" (what llama.cpp
// and Gemma 3 produce).
#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvserve {
namespace {

using ::testing::HasSubstr;

struct FamilyCase {
  const char* family;
  const char* source;  // real tokenizer.chat_template
  const char* bos;
  const char* eos;
  const char* system_gen;     // kSystem + kShort, add_generation_prompt = true
  const char* system_no_gen;  // kSystem + kShort, add_generation_prompt = false
  const char* no_system_gen;  // kShort, add_generation_prompt = true
  const char* long_gen;       // kSystem + kLong (llama.cpp's test conversation), true
};

// clang-format off
const FamilyCase kCases[] = {
// Generated from the real templates rendered with jinja2 (trim_blocks, lstrip_blocks).
    {
      .family = "chatml",
      .source = R"tmpl({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})tmpl",
      .bos = "", .eos = "",
      .system_gen = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n"
          "Hi there<|im_end|>\n<|im_start|>user\n"
          "Who are you<|im_end|>\n"
          "<|im_start|>assistant\n",
      .system_no_gen = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n"
          "Hi there<|im_end|>\n<|im_start|>user\n"
          "Who are you<|im_end|>\n",
      .no_system_gen = "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n"
          "Hi there<|im_end|>\n<|im_start|>user\n"
          "Who are you<|im_end|>\n"
          "<|im_start|>assistant\n",
      .long_gen = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\n"
          "Hi there<|im_end|>\n<|im_start|>user\n"
          "Who are you<|im_end|>\n"
          "<|im_start|>assistant\n"
          "   I am an assistant   <|im_end|>\n"
          "<|im_start|>user\nAnother question<|im_end|>\n"
          "<|im_start|>assistant\n",
    },
    {
      .family = "llama2",
      .source = R"tmpl({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s>[INST] <<SYS>>\nYou are a helpful assistant\n"
          "<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST]",
      .system_no_gen = "<s>[INST] <<SYS>>\nYou are a helpful assistant\n"
          "<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST]",
      .no_system_gen = "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST]",
      .long_gen = "<s>[INST] <<SYS>>\nYou are a helpful assistant\n"
          "<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant "
          "</s><s>[INST] Another question [/INST]",
    },
    {
      .family = "llama3",
      .source = R"tmpl({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})tmpl",
      .bos = "<|begin_of_text|>", .eos = "<|eot_id|>",
      .system_gen = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
          "\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\n",
      .system_no_gen = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
          "\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nWho are you<|eot_id|>",
      .no_system_gen = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n"
          "\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\n",
      .long_gen = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
          "\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
          "\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
          "\n",
    },
    {
      .family = "mistral-legacy",
      .source = R"tmpl({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s>[INST] You are a helpful assistant\n"
          "\nHello [/INST]Hi there</s>[INST] Who are you [/INST]",
      .system_no_gen = "<s>[INST] You are a helpful assistant\n"
          "\nHello [/INST]Hi there</s>[INST] Who are you [/INST]",
      .no_system_gen = "<s>[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]",
      .long_gen = "<s>[INST] You are a helpful assistant\n"
          "\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>"
          "[INST] Another question [/INST]",
    },
    {
      .family = "mistral-v1",
      .source = R"tmpl({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s> [INST] You are a helpful assistant\n"
          "\nHello [/INST] Hi there</s> [INST] Who are you [/INST]",
      .system_no_gen = "<s> [INST] You are a helpful assistant\n"
          "\nHello [/INST] Hi there</s> [INST] Who are you [/INST]",
      .no_system_gen = "<s> [INST] Hello [/INST] Hi there</s> [INST] Who are you [/INST]",
      .long_gen = "<s> [INST] You are a helpful assistant\n"
          "\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assistant   </s>"
          " [INST] Another question [/INST]",
    },
    {
      .family = "mistral-v3",
      .source = R"tmpl({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
)tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s>[INST] Hello[/INST] Hi there</s>[INST] You are a helpful assistant\n"
          "\nWho are you[/INST]",
      .system_no_gen = "<s>[INST] Hello[/INST] Hi there</s>[INST] You are a helpful assistant\n"
          "\nWho are you[/INST]",
      .no_system_gen = "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]",
      .long_gen = "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
          "[INST] You are a helpful assistant\n"
          "\nAnother question[/INST]",
    },
    {
      .family = "mistral-v3-tekken",
      .source = R"tmpl({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS][" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- message["content"] + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS]{"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
)tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s>[INST]Hello[/INST]Hi there</s>[INST]You are a helpful assistant\n"
          "\nWho are you[/INST]",
      .system_no_gen = "<s>[INST]Hello[/INST]Hi there</s>[INST]You are a helpful assistant\n"
          "\nWho are you[/INST]",
      .no_system_gen = "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]",
      .long_gen = "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
          "</s>[INST]You are a helpful assistant\n"
          "\nAnother question[/INST]",
    },
    {
      .family = "mistral-v7",
      .source = R"tmpl({{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
          " Hi there</s>[INST] Who are you[/INST]",
      .system_no_gen = "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
          " Hi there</s>[INST] Who are you[/INST]",
      .no_system_gen = "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]",
      .long_gen = "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
          " Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
          "question[/INST]",
    },
    {
      .family = "gemma",
      .source = R"tmpl({% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})tmpl",
      .bos = "", .eos = "<eos>",
      .system_gen = "<start_of_turn>user\n"
          "You are a helpful assistant\n"
          "\nHello<end_of_turn>\n"
          "<start_of_turn>model\n"
          "Hi there<end_of_turn>\n"
          "<start_of_turn>user\n"
          "Who are you<end_of_turn>\n"
          "<start_of_turn>model\n",
      .system_no_gen = "<start_of_turn>user\n"
          "You are a helpful assistant\n"
          "\nHello<end_of_turn>\n"
          "<start_of_turn>model\n"
          "Hi there<end_of_turn>\n"
          "<start_of_turn>user\n"
          "Who are you<end_of_turn>\n",
      .no_system_gen = "<start_of_turn>user\n"
          "Hello<end_of_turn>\n<start_of_turn>model\n"
          "Hi there<end_of_turn>\n"
          "<start_of_turn>user\n"
          "Who are you<end_of_turn>\n"
          "<start_of_turn>model\n",
      .long_gen = "<start_of_turn>user\n"
          "You are a helpful assistant\n"
          "\nHello<end_of_turn>\n"
          "<start_of_turn>model\n"
          "Hi there<end_of_turn>\n"
          "<start_of_turn>user\n"
          "Who are you<end_of_turn>\n"
          "<start_of_turn>model\n"
          "I am an assistant<end_of_turn>\n"
          "<start_of_turn>user\n"
          "Another question<end_of_turn>\n"
          "<start_of_turn>model\n",
    },
    {
      .family = "phi3",
      .source = R"tmpl({{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '
' + message['content'] + '<|end|>
' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %})tmpl",
      .bos = "<s>", .eos = "<|endoftext|>",
      .system_gen = "<s><|system|>\nYou are a helpful assistant<|end|>\n"
          "<|user|>\nHello<|end|>\n"
          "<|assistant|>\nHi there<|end|>\n"
          "<|user|>\nWho are you<|end|>\n"
          "<|assistant|>\n",
      .system_no_gen = "<s><|system|>\nYou are a helpful assistant<|end|>\n"
          "<|user|>\nHello<|end|>\n"
          "<|assistant|>\nHi there<|end|>\n"
          "<|user|>\nWho are you<|end|>\n"
          "<|endoftext|>",
      .no_system_gen = "<s><|user|>\nHello<|end|>\n"
          "<|assistant|>\nHi there<|end|>\n"
          "<|user|>\nWho are you<|end|>\n"
          "<|assistant|>\n",
      .long_gen = "<s><|system|>\nYou are a helpful assistant<|end|>\n"
          "<|user|>\nHello<|end|>\n"
          "<|assistant|>\nHi there<|end|>\n"
          "<|user|>\nWho are you<|end|>\n"
          "<|assistant|>\n   I am an assistant   <|end|>\n"
          "<|user|>\nAnother question<|end|>\n"
          "<|assistant|>\n",
    },
    {
      .family = "zephyr",
      .source = R"tmpl({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "<|system|>\nYou are a helpful assistant</s>\n"
          "<|user|>\nHello</s>\n"
          "<|assistant|>\nHi there</s>\n"
          "<|user|>\nWho are you</s>\n"
          "<|assistant|>\n",
      .system_no_gen = "<|system|>\nYou are a helpful assistant</s>\n"
          "<|user|>\nHello</s>\n"
          "<|assistant|>\nHi there</s>\n"
          "<|user|>\nWho are you</s>\n",
      .no_system_gen = "<|user|>\nHello</s>\n"
          "<|assistant|>\nHi there</s>\n"
          "<|user|>\nWho are you</s>\n"
          "<|assistant|>\n",
      .long_gen = "<|system|>\nYou are a helpful assistant</s>\n"
          "<|user|>\nHello</s>\n"
          "<|assistant|>\nHi there</s>\n"
          "<|user|>\nWho are you</s>\n"
          "<|assistant|>\n   I am an assistant   </s>\n"
          "<|user|>\nAnother question</s>\n"
          "<|assistant|>\n",
    },
    {
      .family = "vicuna",
      .source = R"tmpl({%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '

' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '
'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>
' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "You are a helpful assistant\n"
          "\nUSER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:",
      .system_no_gen = "You are a helpful assistant\n"
          "\nUSER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\n",
      .no_system_gen = "USER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:",
      .long_gen = "You are a helpful assistant\n"
          "\nUSER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:    I am an assistant   </s>\n"
          "USER: Another question\n"
          "ASSISTANT:",
    },
    {
      .family = "vicuna-orca",
      .source = R"tmpl({%- for message in messages %}{%- if message['role'] == 'system' -%}{{-'SYSTEM: ' + message['content'] + '
' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '
'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>
' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%})tmpl",
      .bos = "<s>", .eos = "</s>",
      .system_gen = "SYSTEM: You are a helpful assistant\n"
          "USER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:",
      .system_no_gen = "SYSTEM: You are a helpful assistant\n"
          "USER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\n",
      .no_system_gen = "USER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:",
      .long_gen = "SYSTEM: You are a helpful assistant\n"
          "USER: Hello\nASSISTANT: Hi there</s>\n"
          "USER: Who are you\nASSISTANT:    I am an assistant   </s>\n"
          "USER: Another question\n"
          "ASSISTANT:",
    },
    {
      .family = "deepseek",
      .source = R"tmpl({% if not add_generation_prompt is defined %}
{% set add_generation_prompt = false %}
{% endif %}
{%- set ns = namespace(found=false) -%}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {%- set ns.found = true -%}
    {%- endif -%}
{%- endfor -%}
{{bos_token}}{%- if not ns.found -%}
{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\n'}}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}
{{ message['content'] }}
    {%- else %}
        {%- if message['role'] == 'user' %}
{{'### Instruction:\n' + message['content'] + '\n'}}
        {%- else %}
{{'### Response:\n' + message['content'] + '\n<|EOT|>\n'}}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}
{{'### Response:'}}
{% endif %})tmpl",
      .bos = "<｜begin▁of▁sentence｜>", .eos = "<|EOT|>",
      .system_gen = "<｜begin▁of▁sentence｜>You are a helpful assistant### Instruction:\n"
          "Hello\n### Response:\n"
          "Hi there\n<|EOT|>\n### Instruction:\n"
          "Who are you\n### Response:\n",
      .system_no_gen = "<｜begin▁of▁sentence｜>You are a helpful assistant### Instruction:\n"
          "Hello\n### Response:\n"
          "Hi there\n<|EOT|>\n### Instruction:\n"
          "Who are you\n",
      .no_system_gen = "<｜begin▁of▁sentence｜>You are an AI programming assistant, utilizing the Deepseek "
          "Coder model, developed by Deepseek Company, and you only answer questions related "
          "to computer science. For politically sensitive questions, security and privacy issues, "
          "and other non-computer science questions, you will refuse to answer\n"
          "### Instruction:\nHello\n"
          "### Response:\nHi there\n"
          "<|EOT|>\n### Instruction:\n"
          "Who are you\n### Response:\n",
      .long_gen = "<｜begin▁of▁sentence｜>You are a helpful assistant### Instruction:\n"
          "Hello\n### Response:\n"
          "Hi there\n<|EOT|>\n### Instruction:\n"
          "Who are you\n### Response:\n"
          "   I am an assistant   \n"
          "<|EOT|>\n### Instruction:\n"
          "Another question\n### Response:\n",
    },
    {
      .family = "command-r",
      .source = R"tmpl({{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif false == true %}{% set loop_messages = messages %}{% set system_message = 'You are Command-R, a brilliant, sophisticated, AI-assistant trained to assist human users by providing thorough responses. You are trained by Cohere.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %})tmpl",
      .bos = "<BOS_TOKEN>", .eos = "<|END_OF_TURN_TOKEN|>",
      .system_gen = "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
          "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
          "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>"
          "Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
      .system_no_gen = "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
          "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
          "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>"
          "Who are you<|END_OF_TURN_TOKEN|>",
      .no_system_gen = "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
          "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>"
          "Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
      .long_gen = "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
          "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
          "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>"
          "Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an "
          "assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|>"
          "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    },
};
// clang-format on

const ChatMessage kSystem = {"system", "You are a helpful assistant"};
const std::vector<ChatMessage> kShort = {
    {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"}};
const std::vector<ChatMessage> kLong = {{"user", "Hello"},
                                        {"assistant", "Hi there"},
                                        {"user", "Who are you"},
                                        {"assistant", "   I am an assistant   "},
                                        {"user", "Another question"}};

std::vector<ChatMessage> WithSystem(const std::vector<ChatMessage>& turns) {
  std::vector<ChatMessage> out = {kSystem};
  out.insert(out.end(), turns.begin(), turns.end());
  return out;
}

std::string RenderOrDie(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const FamilyCase& c) {
  Result<std::string> r = t.Render(messages, add_generation_prompt, c.bos, c.eos);
  EXPECT_TRUE(r.ok()) << c.family << ": " << r.status().ToString();
  return r.ok() ? *r : std::string();
}

TEST(ChatTemplate, DetectsEachFamilyFromItsRealTemplate) {
  for (const FamilyCase& c : kCases) {
    Result<ChatTemplate> t = ChatTemplate::Detect(c.source);
    ASSERT_TRUE(t.ok()) << c.family << ": " << t.status().ToString();
    EXPECT_EQ(t->name(), c.family);
  }
}

TEST(ChatTemplate, RendersExactlyWhatTheRealTemplateRenders) {
  for (const FamilyCase& c : kCases) {
    SCOPED_TRACE(c.family);
    Result<ChatTemplate> t = ChatTemplate::FromName(c.family);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(RenderOrDie(*t, WithSystem(kShort), true, c), c.system_gen);
    EXPECT_EQ(RenderOrDie(*t, WithSystem(kShort), false, c), c.system_no_gen);
    EXPECT_EQ(RenderOrDie(*t, kShort, true, c), c.no_system_gen);
    EXPECT_EQ(RenderOrDie(*t, WithSystem(kLong), true, c), c.long_gen);
  }
}

TEST(ChatTemplate, DetectsOtherRealVariantsOfAFamily) {
  // Phi-3-mini-4k-instruct (renders differently: drops system; detection only).
  EXPECT_EQ(
      ChatTemplate::Detect(
          R"tmpl({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '
' + message['content'] + '<|end|>' + '
' + '<|assistant|>' + '
'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '
'}}{% endif %}{% endfor %})tmpl")
          ->name(),
      "phi3");
  // Meta-Llama-3-8B-Instruct's first published template (no add_generation_prompt guard).
  EXPECT_EQ(
      ChatTemplate::Detect(
          R"tmpl({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }})tmpl")
          ->name(),
      "llama3");
}

TEST(ChatTemplate, UnknownTemplateIsUnimplementedAndNamesTheFlag) {
  Result<ChatTemplate> t = ChatTemplate::Detect("{{ messages | my_custom_filter }}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(t.status().message(), HasSubstr("--chat-template"));
  EXPECT_THAT(t.status().message(), HasSubstr("chatml"));
}

TEST(ChatTemplate, UnknownNameIsInvalidArgumentListingKnownNames) {
  Result<ChatTemplate> t = ChatTemplate::FromName("llama5");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("'llama5'"));
  for (const std::string& name : ChatTemplate::KnownNames()) {
    EXPECT_THAT(t.status().message(), HasSubstr(name));
    EXPECT_TRUE(ChatTemplate::FromName(name).ok()) << name;
  }
}

TEST(ChatTemplate, FamiliesThatPrintAnyRoleAcceptToolMessages) {
  const std::vector<ChatMessage> m = {{"user", "x"}, {"tool", "{}"}};
  EXPECT_EQ(*ChatTemplate::FromName("chatml")->Render(m, true, "", ""),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>tool\n{}<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<ChatMessage> ipython = {{"ipython", " 42 "}};
  EXPECT_EQ(*ChatTemplate::FromName("llama3")->Render(ipython, true, "<B>", ""),
            "<B><|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, RejectsRolesAndOrdersTheFamilyCannotRender) {
  const ChatTemplate llama2 = *ChatTemplate::FromName("llama2");
  const std::vector<ChatMessage> tool = {{"user", "x"}, {"tool", "{}"}};
  Result<std::string> r = llama2.Render(tool, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("role 'tool'"));

  const std::vector<ChatMessage> twice = {{"user", "a"}, {"user", "b"}};
  r = ChatTemplate::FromName("gemma")->Render(twice, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("alternate"));

  const std::vector<ChatMessage> late_system = {{"user", "a"}, {"system", "s"}};
  r = ChatTemplate::FromName("mistral-v1")->Render(late_system, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("first message"));

  EXPECT_FALSE(ChatTemplate::FromName("chatml")->Render({}, true, "", "").ok());
}

TEST(ChatTemplate, MistralV3DropsTheSystemMessageUnlessTheLastTurnIsUser) {
  // As the real template does: the system text rides on the last message only if it is a user.
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "Hello"}, {"assistant", "Hi"}};
  EXPECT_EQ(*ChatTemplate::FromName("mistral-v3")->Render(m, false, "<s>", "</s>"),
            "<s>[INST] Hello[/INST] Hi</s>");
}

TEST(ChatTemplate, TrimsOnlyWhereTheTemplateTrims) {
  const std::vector<ChatMessage> m = {{"user", "  a  "}, {"assistant", " b "}};
  EXPECT_EQ(*ChatTemplate::FromName("gemma")->Render(m, false, "", ""),
            "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n");
  EXPECT_EQ(*ChatTemplate::FromName("chatml")->Render(m, false, "", ""),
            "<|im_start|>user\n  a  <|im_end|>\n<|im_start|>assistant\n b <|im_end|>\n");
}

// Tools: the expected texts are what the real templates render (Qwen3's tokenizer_config.json
// and Llama 3.1 Instruct's, under Hugging Face's Jinja settings) for the same conversation.
const nlohmann::ordered_json kWeatherTool = nlohmann::ordered_json::parse(R"({"type": "function",
  "function": {"name": "get_weather", "description": "Get the weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
  "required": ["city"]}}})");

std::vector<ChatMessage> ToolConversation(std::string arguments, std::string result) {
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Weather in Paris?"}};
  ChatMessage call{.role = "assistant", .content = ""};
  call.tool_calls.push_back(ToolCall{"c1", "get_weather", std::move(arguments)});
  m.push_back(call);
  m.push_back(ChatMessage{.role = "tool", .content = std::move(result), .tool_call_id = "c1"});
  return m;
}

TEST(ChatTemplateTools, ChatmlRendersQwen3sHermesFormat) {
  const ChatTemplate t = *ChatTemplate::FromName("chatml");
  EXPECT_EQ(t.tool_format(), ToolFormat::kHermes);
  const std::vector<nlohmann::ordered_json> tools = {kWeatherTool};
  EXPECT_EQ(
      *t.Render(ToolConversation(R"({"city":"Paris"})", R"({"temp": 21})"), tools, true, "", ""),
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
      "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
      "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", "
      "\"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json "
      "object with function name and arguments within <tool_call></tool_call> XML "
      "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in "
      "Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
      "<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTools, ChatmlGroupsConsecutiveToolResultsAndSeparatesCalls) {
  std::vector<ChatMessage> m = {{"user", "q"}};
  ChatMessage calls{.role = "assistant", .content = "Let me check."};
  calls.tool_calls = {ToolCall{"a", "f", "{}"}, ToolCall{"b", "g", "{\"x\":1}"}};
  m.push_back(calls);
  m.push_back(ChatMessage{.role = "tool", .content = "1", .tool_call_id = "a"});
  m.push_back(ChatMessage{.role = "tool", .content = "2", .tool_call_id = "b"});
  EXPECT_EQ(*ChatTemplate::FromName("chatml")->Render(m, {}, false, "", ""),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nLet me check.\n<tool_call>\n"
            "{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", "
            "\"arguments\": {\"x\":1}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
            "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
            "<|im_end|>\n");
}

TEST(ChatTemplateTools, Llama3RendersLlama31sJsonFormat) {
  const ChatTemplate t = *ChatTemplate::FromName("llama3");
  EXPECT_EQ(t.tool_format(), ToolFormat::kLlama3Json);
  const std::vector<nlohmann::ordered_json> tools = {kWeatherTool};
  EXPECT_EQ(
      *t.Render(ToolConversation(R"({"city": "Paris"})", "21 degrees"), tools, true,
                "<|begin_of_text|>", ""),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: "
      "ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe "
      "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following "
      "functions, please respond with a JSON for a function call with its proper arguments that "
      "best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
      "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    "
      "\"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
      "\"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": "
      "\"object\",\n            \"properties\": {\n                \"city\": {\n                  "
      "  \"type\": \"string\"\n                },\n                \"unit\": {\n                  "
      "  \"enum\": [\n                        \"c\",\n                        \"f\"\n            "
      "        ]\n                }\n            },\n            \"required\": [\n               "
      " \"city\"\n            ]\n        }\n    }\n}\n\nWeather in "
      "Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
      "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>"
      "ipython<|end_header_id|>\n\n\"21 degrees\"<|eot_id|><|start_header_id|>assistant"
      "<|end_header_id|>\n\n");
}

TEST(ChatTemplateTools, RefusedWhereTheFamilyHasNoFormatOrTheFormatCannotSayIt) {
  const std::vector<nlohmann::ordered_json> tools = {kWeatherTool};
  const std::vector<ChatMessage> m = {{"user", "hi"}};
  Result<std::string> r = ChatTemplate::FromName("gemma")->Render(m, tools, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no tool-call format"));
  // Llama 3.1 takes one call per assistant turn and needs a first user message for the tools.
  std::vector<ChatMessage> two = {{"user", "q"}};
  ChatMessage calls{.role = "assistant", .content = ""};
  calls.tool_calls = {ToolCall{"a", "f", "{}"}, ToolCall{"b", "g", "{}"}};
  two.push_back(calls);
  r = ChatTemplate::FromName("llama3")->Render(two, {}, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("one tool call"));
  const std::vector<ChatMessage> only_system = {{"system", "s"}};
  EXPECT_FALSE(ChatTemplate::FromName("llama3")->Render(only_system, tools, true, "", "").ok());
  // Without tools or tool turns, the plain rendering.
  EXPECT_EQ(*ChatTemplate::FromName("chatml")->Render(m, {}, true, "", ""),
            *ChatTemplate::FromName("chatml")->Render(m, true, "", ""));
}

// Harmony (gpt-oss). The expected texts are what gpt-oss's own template renders:
// tests/data/tokenizer/gpt_oss_chat_template.jinja, the chat_template.jinja published with
// openai/gpt-oss-120b (and carried by its GGUFs), with strftime_now() returning 2025-08-05 and
// the same conversations. Python's jinja2 was not at hand, so they were rendered with
// @huggingface/jinja 0.5.11, which applies Hugging Face's trim_blocks and lstrip_blocks.
std::string HarmonyHead(const std::string& effort) {
  return "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: " +
         effort +
         "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
         "message.<|end|>";
}

const ChatRenderOptions kHarmonyDay{.date = "2025-08-05"};

std::string RenderHarmony(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const ChatRenderOptions& options = kHarmonyDay) {
  Result<std::string> r =
      ChatTemplate::FromName("harmony")->Render(messages, add_generation_prompt, "", "", options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::string();
}

TEST(ChatTemplateHarmony, DetectedFromGptOssOwnTemplate) {
  const char* path = "tests/data/tokenizer/gpt_oss_chat_template.jinja";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " (tests run from the repository root)";
  std::stringstream source;
  source << in.rdbuf();
  Result<ChatTemplate> t = ChatTemplate::Detect(source.str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name(), "harmony");
  EXPECT_EQ(t->reply_format(), ReplyFormat::kHarmony);
  EXPECT_EQ(ChatTemplate::FromName("chatml")->reply_format(), ReplyFormat::kPlain);
}

TEST(ChatTemplateHarmony, RendersExactlyWhatGptOssTemplateRenders) {
  const std::string developer =
      "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant\n\n<|end|>";
  const std::string turns =
      "<|start|>user<|message|>Hello<|end|><|start|>assistant<|channel|>final<|message|>Hi "
      "there<|end|><|start|>user<|message|>Who are you<|end|>";
  EXPECT_EQ(RenderHarmony(WithSystem(kShort), true),
            HarmonyHead("medium") + developer + turns + "<|start|>assistant");
  EXPECT_EQ(RenderHarmony(WithSystem(kShort), false), HarmonyHead("medium") + developer + turns);
  EXPECT_EQ(RenderHarmony(kShort, true), HarmonyHead("medium") + turns + "<|start|>assistant");
  EXPECT_EQ(RenderHarmony(WithSystem(kLong), true),
            HarmonyHead("medium") + developer + turns +
                "<|start|>assistant<|channel|>final<|message|>   I am an assistant   <|end|>"
                "<|start|>user<|message|>Another question<|end|><|start|>assistant");
}

TEST(ChatTemplateHarmony, EndsAFinishedReplyWithReturnOnlyWithoutGenerationPrompt) {
  std::vector<ChatMessage> m = WithSystem(kShort);
  m.push_back({"assistant", "I am gpt-oss"});
  const std::string before =
      HarmonyHead("medium") +
      "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant\n\n<|end|>"
      "<|start|>user<|message|>Hello<|end|><|start|>assistant<|channel|>final<|message|>Hi "
      "there<|end|><|start|>user<|message|>Who are you<|end|>"
      "<|start|>assistant<|channel|>final<|message|>I am gpt-oss";
  EXPECT_EQ(RenderHarmony(m, false), before + "<|return|>");
  EXPECT_EQ(RenderHarmony(m, true), before + "<|end|><|start|>assistant");
}

TEST(ChatTemplateHarmony, PrintsTheReasoningEffortAndSkipsAnEmptyDeveloperMessage) {
  const std::vector<ChatMessage> empty_system = {{"system", ""}, {"user", "Héllo\n  {x}"}};
  EXPECT_EQ(RenderHarmony(empty_system, true, {.date = "2025-08-05", .reasoning_effort = "high"}),
            HarmonyHead("high") + "<|start|>user<|message|>Héllo\n  {x}<|end|><|start|>assistant");
  // The OpenAI codec reads role "developer" as "system".
  const std::vector<ChatMessage> developer = {{"system", "Be brief."}, {"user", "2+2?"}};
  EXPECT_EQ(RenderHarmony(developer, true, {.date = "2025-08-05", .reasoning_effort = "low"}),
            HarmonyHead("low") +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                "<|start|>user<|message|>2+2?<|end|><|start|>assistant");
}

TEST(ChatTemplateHarmony, DateDefaultsToTodayInUtc) {
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const std::string before = UtcDate(now_ms());
  const std::string text = RenderHarmony({{"user", "x"}}, true, ChatRenderOptions{});
  const std::string after = UtcDate(now_ms());
  EXPECT_TRUE(text.find("Current date: " + before + "\n") != std::string::npos ||
              text.find("Current date: " + after + "\n") != std::string::npos)
      << text;
}

TEST(ChatTemplateHarmony, RefusesALateSystemMessageToolsAndToolTurns) {
  const ChatTemplate t = *ChatTemplate::FromName("harmony");
  EXPECT_EQ(t.tool_format(), ToolFormat::kNone);
  const std::vector<ChatMessage> late_system = {{"user", "a"}, {"system", "s"}};
  Result<std::string> r = t.Render(late_system, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("first message"));
  const std::vector<nlohmann::ordered_json> tools = {kWeatherTool};
  const std::vector<ChatMessage> hi = {{"user", "hi"}};
  r = t.Render(hi, tools, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no tool-call format"));
  r = t.Render(ToolConversation("{}", "21"), {}, true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no tool-call format"));
}

TEST(UtcDate, FormatsUnixMillisecondsAsTheUtcDay) {
  EXPECT_EQ(UtcDate(0), "1970-01-01");
  EXPECT_EQ(UtcDate(1754352000000), "2025-08-05");
  EXPECT_EQ(UtcDate(1754352000000 - 1), "2025-08-04");
  EXPECT_EQ(UtcDate(1709251199999), "2024-02-29");
  EXPECT_EQ(UtcDate(-1000), "1969-12-31");
}

TEST(PyJsonDumps, MatchesPythonsSeparatorsAndIndent) {
  const auto j = nlohmann::ordered_json::parse(R"({"b": [1, 2.5, {}], "a": "é\n", "c": []})");
  EXPECT_EQ(PyJsonDumps(j), "{\"b\": [1, 2.5, {}], \"a\": \"é\\n\", \"c\": []}");
  EXPECT_EQ(PyJsonDumps(j, 2), "{\n  \"b\": [\n    1,\n    2.5,\n    {}\n  ],\n  \"a\": "
                               "\"é\\n\",\n  \"c\": []\n}");
}

}  // namespace
}  // namespace kvserve
