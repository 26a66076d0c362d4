// Synthetic models: GGUF files with seeded random weights in the exact layout of real llama /
// qwen2 / qwen3 files, for tests and benchmarks.
//
// Weights are drawn uniformly with standard deviation 1/sqrt(fan_in) from a splitmix64 stream of
// the seed (so the same seed gives the same bytes on every platform and compiler); norms are
// 1 ± 0.1 and biases ±0.1, which keeps activations finite through any depth. Output rows of
// unused, control and byte tokens are zero, so generated text is made of real pieces.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_writer.h"
#include "kvserve/status.h"
#include "quant/types.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

struct SyntheticModelSpec {
  std::string arch = "llama";  // llama, qwen2, qwen3
  int num_layers = 2;
  int hidden = 256;
  int num_heads = 8;
  int num_kv_heads = 8;
  int ffn = 512;
  int head_dim = 0;              // 0 = hidden / num_heads
  int context_length = 2048;
  float rope_base = 10000.f;
  GgmlType type = GgmlType::kF32;  // type of the 2-D weight matrices
  bool tie_embeddings = false;
  uint64_t seed = 1;
  std::string name = "kvserve-synthetic";
  TokenizerSpec tokenizer;       // vocabulary size = tokenizer.tokens.size()
};

// Builds the GGUF in memory. A matrix whose row length does not fit `type`'s block size falls
// back to Q8_0, then F16 (as llama.cpp's quantizer does).
Result<GgufWriter> BuildSyntheticModel(const SyntheticModelSpec& spec);

// A small llama with the synthetic vocabulary (4 layers, hidden 256): the tests' stock model.
SyntheticModelSpec SmallSyntheticModelSpec();

// Opens the GGUF at `path` with its pages mapped up front, or the embedded default model
// (engine/embedded_model.h: kvserve's own trained model) when `path` is empty. What every
// command that loads a model calls.
Result<GgufFile> OpenModelOrDefault(const std::string& path);

}  // namespace kvserve
