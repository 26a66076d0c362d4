// Options shared by the commands that run a model on one Generator (run, logits, perplexity):
// the flags, and loading the model (or the embedded default) with its tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

struct EngineOptions {
  std::string model;
  int threads = 0;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  int ctx = 0;
  int block_size = 16;
  int batch = 512;
};

void AddEngineOptions(CLI::App* cmd, EngineOptions& o);

struct Loaded {
  std::unique_ptr<Generator> generator;
  std::optional<Tokenizer> tokenizer;
};

// Loads the model and builds its Generator; Fail()s with a clear message on any error.
Loaded Load(const EngineOptions& o, bool need_tokenizer);

}  // namespace kvserve::cli
