// Workloads: the requests a benchmark sends, built before the run to target token lengths.
//
// Every prompt is a list of Segments (system prompt, question, document, user turn, answer).
// Requests that share a prefix share byte-identical leading segments, so a server can cache
// them; the segment list is also what the ideal cached-token count is computed from
// (ideal_cache.h).
//
//   shared-prefix  G groups x P prompts: a group's S-token system prompt + a Q-token question
//                  (SGLang's generated-shared-prefix). Sent group by group.
//   repeat-prefix  N prompts over K prefixes of L tokens, each + an own suffix of X tokens,
//                  in seeded random order (vLLM's prefix_repetition); --order interleave
//                  sends prefixes 0, 1, .., K-1, 0, 1, .. (cyclic: defeats an LRU cache
//                  smaller than the K prefixes), tile sends each prefix's prompts together.
//   multi-turn     C conversations x R rounds; a round sends the whole history (earlier user
//                  turns and the server's real answers) + a new U-token user turn. Round r+1
//                  of a conversation is sent only after round r finished.
//   long-doc       D documents of L tokens, Q questions each; order tile (d0q0 d0q1 .. d1q0)
//                  or interleave (d0q0 d1q0 .. d0q1).
//   random         N prompts of input-len tokens (+- range-ratio), no sharing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "loadgen/text_gen.h"

namespace kvserve::loadgen {

enum class WorkloadKind { kSharedPrefix, kRepeatPrefix, kMultiTurn, kLongDoc, kRandom };
enum class DocOrder { kTile, kInterleave, kRandom };

Result<WorkloadKind> ParseWorkloadKind(std::string_view name);
const char* WorkloadKindName(WorkloadKind kind);
Result<DocOrder> ParseDocOrder(std::string_view name);
const char* DocOrderName(DocOrder order);

struct WorkloadConfig {
  WorkloadKind kind = WorkloadKind::kSharedPrefix;
  uint64_t seed = 0;
  int output_len = 32;  // max_tokens of every request (answer length for multi-turn)
  // shared-prefix
  int groups = 4;
  int prompts_per_group = 8;
  int system_prompt_len = 1024;
  int question_len = 32;  // also long-doc
  // repeat-prefix and random
  int num_prompts = 32;
  int num_prefixes = 4;
  int prefix_len = 512;
  int suffix_len = 64;
  int input_len = 256;
  double range_ratio = 0.0;  // random: input lengths uniform in len * [1 - r, 1 + r]
  // multi-turn
  int conversations = 8;
  int rounds = 4;
  int user_len = 64;
  // long-doc
  int num_docs = 2;
  int doc_len = 2048;
  int questions_per_doc = 4;
  DocOrder order = DocOrder::kTile;  // long-doc; also repeat-prefix (see repeat_order)
  DocOrder repeat_order = DocOrder::kRandom;
};

// Checks the parameters the workload uses; the message names the flag.
Status ValidateWorkloadConfig(const WorkloadConfig& config);

enum class Role { kSystem, kUser, kAssistant };
const char* RoleName(Role role);

struct Segment {
  Role role = Role::kUser;
  std::string content;
  int num_tokens = 0;  // content alone, no special tokens, as the token counter measured it
};

struct RequestSpec {
  int id = 0;        // index in Workload::requests
  int group = 0;     // group, prefix, conversation or document index
  int turn = 0;      // round (multi-turn), question index (long-doc), else index in the group
  std::vector<Segment> segments;  // for a later multi-turn round: only its new user turn
  int max_tokens = 0;
  int prev_id = -1;  // multi-turn: the round whose answer must come first
};

struct Workload {
  WorkloadKind kind = WorkloadKind::kSharedPrefix;
  bool conversational = false;    // multi-turn: completions prompts carry role labels
  std::vector<RequestSpec> requests;  // in send order, a request waiting on prev_id aside
  int num_counter_calls = 0;
};

Result<Workload> BuildWorkload(const WorkloadConfig& config, TextBuilder& builder);

// Multi-turn: the full segments of `next` once the previous round (whose full segments are
// `prev_segments`) answered `answer` in `answer_tokens` tokens.
std::vector<Segment> WithHistory(const std::vector<Segment>& prev_segments, std::string answer,
                                 int answer_tokens, const RequestSpec& next);

// The prompt for /v1/completions: segment contents joined by blank lines; conversational
// workloads label each turn ("User: ...", "Assistant: ...") and end with "Assistant:".
std::string RenderCompletionPrompt(const std::vector<Segment>& segments, bool conversational);

struct ChatMessage {
  Role role;
  std::string content;
};
// The messages for /v1/chat/completions: consecutive segments of one role are merged with a
// blank line between them.
std::vector<ChatMessage> RenderChatMessages(const std::vector<Segment>& segments);

}  // namespace kvserve::loadgen
