#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace kvserve::loadgen {
namespace {

// Each segment draws its words from its own stream, so its text does not depend on how many
// words other segments needed (which depends on the server's tokenizer).
enum SegmentLabel : uint64_t { kSystem = 1, kQuestion, kPrefix, kSuffix, kUser, kDoc, kInput };

uint64_t Label(SegmentLabel what, int a, int b = 0) {
  return (static_cast<uint64_t>(what) << 48) | (static_cast<uint64_t>(a) << 24) |
         static_cast<uint64_t>(b);
}

class SegmentMaker {
 public:
  SegmentMaker(uint64_t seed, TextBuilder& builder) : seed_(seed), builder_(builder) {}
  Result<Segment> Make(Role role, int target_tokens, uint64_t label) {
    Rng rng(Rng::DeriveSeed(seed_, label));
    KV_ASSIGN_OR_RETURN(BuiltText t, builder_.Build(rng, target_tokens));
    return Segment{role, std::move(t.text), t.num_tokens};
  }

 private:
  uint64_t seed_;
  TextBuilder& builder_;
};

RequestSpec Spec(int group, int turn, std::vector<Segment> segments, int max_tokens) {
  RequestSpec s;
  s.group = group;
  s.turn = turn;
  s.segments = std::move(segments);
  s.max_tokens = max_tokens;
  return s;
}

Status BuildSharedPrefix(const WorkloadConfig& c, SegmentMaker& make, Workload& w) {
  for (int g = 0; g < c.groups; ++g) {
    KV_ASSIGN_OR_RETURN(Segment system, make.Make(Role::kSystem, c.system_prompt_len,
                                                  Label(kSystem, g)));
    for (int p = 0; p < c.prompts_per_group; ++p) {
      KV_ASSIGN_OR_RETURN(Segment q, make.Make(Role::kUser, c.question_len, Label(kQuestion, g, p)));
      w.requests.push_back(Spec(g, p, {system, std::move(q)}, c.output_len));
    }
  }
  return Status::Ok();
}

Status BuildRepeatPrefix(const WorkloadConfig& c, SegmentMaker& make, Workload& w) {
  std::vector<Segment> prefixes;
  for (int k = 0; k < c.num_prefixes; ++k) {
    KV_ASSIGN_OR_RETURN(Segment p, make.Make(Role::kUser, c.prefix_len, Label(kPrefix, k)));
    prefixes.push_back(std::move(p));
  }
  // Prompt i uses prefix i % K: in index order that is cyclic (interleave); tile sorts by
  // prefix; random shuffles (Fisher-Yates, seeded).
  std::vector<int> order(static_cast<size_t>(c.num_prompts));
  for (int i = 0; i < c.num_prompts; ++i) order[static_cast<size_t>(i)] = i;
  if (c.repeat_order == DocOrder::kTile) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return a % c.num_prefixes < b % c.num_prefixes; });
  } else if (c.repeat_order == DocOrder::kRandom) {
    Rng rng(Rng::DeriveSeed(c.seed, Label(kPrefix, 0, 1 << 20)));
    for (int i = c.num_prompts - 1; i > 0; --i) {
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.UniformInt(0, i))]);
    }
  }
  for (int i : order) {
    const int k = i % c.num_prefixes;
    KV_ASSIGN_OR_RETURN(Segment s, make.Make(Role::kUser, c.suffix_len, Label(kSuffix, i)));
    w.requests.push_back(
        Spec(k, i / c.num_prefixes, {prefixes[static_cast<size_t>(k)], std::move(s)}, c.output_len));
  }
  return Status::Ok();
}

Status BuildMultiTurn(const WorkloadConfig& c, SegmentMaker& make, Workload& w) {
  // Round-major order: every conversation's first round, then the second rounds as their first
  // rounds finish, and so on; conversations interleave like users of one server.
  for (int r = 0; r < c.rounds; ++r) {
    for (int conv = 0; conv < c.conversations; ++conv) {
      KV_ASSIGN_OR_RETURN(Segment u, make.Make(Role::kUser, c.user_len, Label(kUser, conv, r)));
      RequestSpec s = Spec(conv, r, {std::move(u)}, c.output_len);
      if (r > 0) s.prev_id = (r - 1) * c.conversations + conv;
      w.requests.push_back(std::move(s));
    }
  }
  return Status::Ok();
}

Status BuildLongDoc(const WorkloadConfig& c, SegmentMaker& make, Workload& w) {
  std::vector<Segment> docs;
  for (int d = 0; d < c.num_docs; ++d) {
    KV_ASSIGN_OR_RETURN(Segment doc, make.Make(Role::kUser, c.doc_len, Label(kDoc, d)));
    docs.push_back(std::move(doc));
  }
  auto add = [&](int d, int q) -> Status {
    KV_ASSIGN_OR_RETURN(Segment question,
                        make.Make(Role::kUser, c.question_len, Label(kQuestion, d, q)));
    w.requests.push_back(
        Spec(d, q, {docs[static_cast<size_t>(d)], std::move(question)}, c.output_len));
    return Status::Ok();
  };
  if (c.order == DocOrder::kTile) {
    for (int d = 0; d < c.num_docs; ++d)
      for (int q = 0; q < c.questions_per_doc; ++q) KV_RETURN_IF_ERROR(add(d, q));
  } else {
    for (int q = 0; q < c.questions_per_doc; ++q)
      for (int d = 0; d < c.num_docs; ++d) KV_RETURN_IF_ERROR(add(d, q));
  }
  return Status::Ok();
}

Status BuildRandom(const WorkloadConfig& c, SegmentMaker& make, Workload& w) {
  Rng rng(Rng::DeriveSeed(c.seed, Label(kInput, 0, 1 << 20)));
  const int lo = std::max(1, static_cast<int>(std::lround(c.input_len * (1.0 - c.range_ratio))));
  const int hi = std::max(lo, static_cast<int>(std::lround(c.input_len * (1.0 + c.range_ratio))));
  for (int i = 0; i < c.num_prompts; ++i) {
    const int len = static_cast<int>(rng.UniformInt(lo, hi));
    KV_ASSIGN_OR_RETURN(Segment s, make.Make(Role::kUser, len, Label(kInput, i)));
    w.requests.push_back(Spec(i, 0, {std::move(s)}, c.output_len));
  }
  return Status::Ok();
}

Status Positive(int value, const char* flag) {
  if (value < 1) return InvalidArgument(fmt::format("{} must be >= 1 (got {})", flag, value));
  return Status::Ok();
}

}  // namespace

Result<WorkloadKind> ParseWorkloadKind(std::string_view name) {
  for (WorkloadKind k : {WorkloadKind::kSharedPrefix, WorkloadKind::kRepeatPrefix,
                         WorkloadKind::kMultiTurn, WorkloadKind::kLongDoc, WorkloadKind::kRandom}) {
    if (name == WorkloadKindName(k)) return k;
  }
  return InvalidArgument(fmt::format("unknown workload '{}': use shared-prefix, repeat-prefix, "
                                     "multi-turn, long-doc or random", name));
}

const char* WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kSharedPrefix: return "shared-prefix";
    case WorkloadKind::kRepeatPrefix: return "repeat-prefix";
    case WorkloadKind::kMultiTurn: return "multi-turn";
    case WorkloadKind::kLongDoc: return "long-doc";
    case WorkloadKind::kRandom: return "random";
  }
  return "?";
}

Result<DocOrder> ParseDocOrder(std::string_view name) {
  if (name == "tile") return DocOrder::kTile;
  if (name == "interleave") return DocOrder::kInterleave;
  if (name == "random") return DocOrder::kRandom;
  return InvalidArgument(
      fmt::format("unknown --order '{}': use tile, interleave or random", name));
}

const char* DocOrderName(DocOrder order) {
  switch (order) {
    case DocOrder::kTile: return "tile";
    case DocOrder::kInterleave: return "interleave";
    case DocOrder::kRandom: return "random";
  }
  return "?";
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "user";
}

Status ValidateWorkloadConfig(const WorkloadConfig& c) {
  KV_RETURN_IF_ERROR(Positive(c.output_len, "--output-len"));
  switch (c.kind) {
    case WorkloadKind::kSharedPrefix:
      KV_RETURN_IF_ERROR(Positive(c.groups, "--groups"));
      KV_RETURN_IF_ERROR(Positive(c.prompts_per_group, "--prompts-per-group"));
      KV_RETURN_IF_ERROR(Positive(c.system_prompt_len, "--system-prompt-len"));
      return Positive(c.question_len, "--question-len");
    case WorkloadKind::kRepeatPrefix:
      KV_RETURN_IF_ERROR(Positive(c.num_prompts, "--num-prompts"));
      KV_RETURN_IF_ERROR(Positive(c.num_prefixes, "--num-prefixes"));
      KV_RETURN_IF_ERROR(Positive(c.prefix_len, "--prefix-len"));
      return Positive(c.suffix_len, "--suffix-len");
    case WorkloadKind::kMultiTurn:
      KV_RETURN_IF_ERROR(Positive(c.conversations, "--conversations"));
      KV_RETURN_IF_ERROR(Positive(c.rounds, "--rounds"));
      return Positive(c.user_len, "--user-len");
    case WorkloadKind::kLongDoc:
      KV_RETURN_IF_ERROR(Positive(c.num_docs, "--docs"));
      KV_RETURN_IF_ERROR(Positive(c.doc_len, "--doc-len"));
      KV_RETURN_IF_ERROR(Positive(c.questions_per_doc, "--questions-per-doc"));
      return Positive(c.question_len, "--question-len");
    case WorkloadKind::kRandom:
      KV_RETURN_IF_ERROR(Positive(c.num_prompts, "--num-prompts"));
      KV_RETURN_IF_ERROR(Positive(c.input_len, "--input-len"));
      if (!(c.range_ratio >= 0 && c.range_ratio < 1)) {
        return InvalidArgument(fmt::format("--range-ratio must be in [0, 1) (got {})", c.range_ratio));
      }
      return Status::Ok();
  }
  return Status::Ok();
}

Result<Workload> BuildWorkload(const WorkloadConfig& config, TextBuilder& builder) {
  KV_RETURN_IF_ERROR(ValidateWorkloadConfig(config));
  Workload w;
  w.kind = config.kind;
  w.conversational = config.kind == WorkloadKind::kMultiTurn;
  SegmentMaker make(config.seed, builder);
  const int calls_before = builder.num_counter_calls();
  switch (config.kind) {
    case WorkloadKind::kSharedPrefix: KV_RETURN_IF_ERROR(BuildSharedPrefix(config, make, w)); break;
    case WorkloadKind::kRepeatPrefix: KV_RETURN_IF_ERROR(BuildRepeatPrefix(config, make, w)); break;
    case WorkloadKind::kMultiTurn: KV_RETURN_IF_ERROR(BuildMultiTurn(config, make, w)); break;
    case WorkloadKind::kLongDoc: KV_RETURN_IF_ERROR(BuildLongDoc(config, make, w)); break;
    case WorkloadKind::kRandom: KV_RETURN_IF_ERROR(BuildRandom(config, make, w)); break;
  }
  for (size_t i = 0; i < w.requests.size(); ++i) w.requests[i].id = static_cast<int>(i);
  w.num_counter_calls = builder.num_counter_calls() - calls_before;
  return w;
}

std::vector<Segment> WithHistory(const std::vector<Segment>& prev_segments, std::string answer,
                                 int answer_tokens, const RequestSpec& next) {
  std::vector<Segment> out = prev_segments;
  out.push_back(Segment{Role::kAssistant, std::move(answer), answer_tokens});
  out.insert(out.end(), next.segments.begin(), next.segments.end());
  return out;
}

std::string RenderCompletionPrompt(const std::vector<Segment>& segments, bool conversational) {
  std::string prompt;
  for (const Segment& s : segments) {
    if (!prompt.empty()) prompt += "\n\n";
    if (conversational) {
      prompt += s.role == Role::kUser ? "User: " : s.role == Role::kAssistant ? "Assistant: "
                                                                              : "System: ";
    }
    prompt += s.content;
  }
  if (conversational) prompt += "\n\nAssistant:";
  return prompt;
}

std::vector<ChatMessage> RenderChatMessages(const std::vector<Segment>& segments) {
  std::vector<ChatMessage> out;
  for (const Segment& s : segments) {
    if (!out.empty() && out.back().role == s.role) {
      out.back().content += "\n\n" + s.content;
    } else {
      out.push_back(ChatMessage{s.role, s.content});
    }
  }
  return out;
}

}  // namespace kvserve::loadgen
