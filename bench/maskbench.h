// MaskBench (guidance-ai/jsonschemabench, folder maskbench/data) run against kvserve's JSON Schema
// constraints: the runner behind `kvserve_structured_bench --maskbench DIR`.
//
// Each file holds {"schema": ..., "tests": [{"data": ..., "valid": bool}, ...]}. For each schema:
//   - compile it (ConstraintCompiler::Compile with flexible whitespace, timed: the grammar and
//     the start state's mask) under the compiler's time limit;
//   - for each test, serialize `data` as MaskBench does (Python's json.dumps with indent=None and
//     ensure_ascii=False: ", " and ": " separators, non-ASCII kept), encode it with the tokenizer
//     (no special tokens), and walk its tokens through the masks: before each token time
//     ConstraintProcessor::Process as the sampler runs it, then check the token is allowed;
//     the walk stops at the first refused token. A test agrees when a valid instance's tokens are
//     all allowed or an invalid one's are not.
// Classified as MaskBench's results script does: compile error (timeout when it was the time
// limit), else the last test that disagrees decides between validation error (a valid instance
// refused) and invalidation error (an invalid one accepted), else passing.
#pragma once

#include <memory>
#include <string>

#include "structured/token_masker.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::bench {

struct MaskBenchOptions {
  std::string dir;                 // the folder of MaskBench's *.json files
  std::string only;                // only files whose name contains this
  int limit = 0;                   // at most this many files (0: all), after sorting by name
  std::string out;                 // where to write one JSON line per schema (empty: nowhere)
  bool json = false;               // end with one line holding the totals as a JSON object
  int compile_timeout_ms = 10000;  // the server's default
};

// Runs the benchmark and prints the table (per split and in total). Returns 0, or 1 when the
// folder cannot be read.
int RunMaskBench(const MaskBenchOptions& options,
                 const std::shared_ptr<const structured::TokenVocab>& vocab,
                 const Tokenizer& tokenizer);

}  // namespace kvserve::bench
