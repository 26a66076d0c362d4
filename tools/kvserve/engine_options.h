// Options shared by the commands that run a model on one Generator (run, logits, perplexity):
// the flags, and loading the model (or the embedded default) with its tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

struct EngineOptions {
  std::string model;
  int threads = 0;
  int poll_us = -1;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  int ctx = 0;
  int block_size = 16;
  int batch = 512;
  std::string kv_cache_memory;  // budget, e.g. "2GiB"; empty = room for one --ctx sequence
  MlaForm mla_form = MlaForm::kAbsorbed;
};

void AddEngineOptions(CLI::App* cmd, EngineOptions& o);

struct Loaded {
  std::unique_ptr<Generator> generator;
  std::optional<Tokenizer> tokenizer;
};

// The KV cache flags, parsed (Fail()s naming the flag on a bad value).
struct KvOptions {
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  uint64_t kv_cache_bytes = 0;  // --kv-cache-memory; 0 = not set
};
KvOptions ParseKvOptions(const EngineOptions& o);

// Opens the model (or the embedded default), with its tokenizer when asked, and loads it for
// --batch tokens per forward pass and a --ctx context; Fail()s with a clear message on any error.
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
};
LoadedModel LoadModel(const EngineOptions& o, bool need_tokenizer);

// Loads the model and builds its Generator; Fail()s with a clear message on any error. Prints
// the KV cache's start-up line (types, bytes per token, capacity) to stderr unless `quiet`.
Loaded Load(const EngineOptions& o, bool need_tokenizer, bool quiet = false);

// The serving engine's config for one request at a time (run's and perplexity --stream's engine
// path): threads, block size, KV types and memory, context and batch from the flags.
EngineConfig OneSequenceEngineConfig(const EngineOptions& o);

// --poll-us: how long compute threads spin before sleeping (run, serve, bench's in-process side).
void AddPollOption(CLI::App* cmd, int& poll_us);
// --mla-attention absorbed|decompressed (deepseek2's attention form, model/model.h).
void AddMlaOption(CLI::App* cmd, MlaForm& form);

// --no-jump-forward and --jump-forward-mode (run and serve): structured output's jump-forward.
struct JumpForwardOptions {
  bool off = false;
  std::string mode = "force";
};
void AddJumpForwardOptions(CLI::App* cmd, JumpForwardOptions& o);
// Sets EngineConfig::jump_forward and jump_forward_mode from the flags.
void ApplyJumpForwardOptions(const JumpForwardOptions& o, EngineConfig* config);

// --kv-eviction, --kv-budget, --kv-sink-tokens, --kv-evict-batch, --h2o-recent-fraction,
// --snapkv-window, --snapkv-kernel (run, perplexity, serve): eviction inside a sequence
// (docs/kv_eviction.md).
struct KvEvictionOptions {
  std::string policy = "none";
  int budget = 0;
  int sink_tokens = 4;
  int evict_batch = 0;
  double h2o_recent_fraction = 0.5;
  int snapkv_window = 32;
  int snapkv_kernel = 5;
};
void AddKvEvictionOptions(CLI::App* cmd, KvEvictionOptions& o);
// The config the flags name; exits with the error for an unknown policy.
KvEvictionConfig KvEvictionFromOptions(const KvEvictionOptions& o);

// The help text of a KV cache type flag.
std::string KvCacheTypeHelp(std::string_view what);

}  // namespace kvserve::cli
