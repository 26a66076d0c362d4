// The `kvserve` command's subcommands. Each Add*Command registers one or more subcommands on the
// root CLI11 app; a subcommand that fails prints a clear message to stderr and throws
// CLI::RuntimeError(exit_code) so main() exits non-zero.
#pragma once

#include <CLI/CLI.hpp>

namespace kvserve::cli {

void AddInspectCommand(CLI::App& app);      // inspect FILE
void AddTokenizeCommands(CLI::App& app);    // tokenize, detokenize, convert-tokenizer
void AddMakeModelCommand(CLI::App& app);    // make-model
void AddRunCommand(CLI::App& app);          // run
void AddLogitsCommand(CLI::App& app);       // logits (reference checks)
void AddPerplexityCommand(CLI::App& app);   // perplexity
void AddServeCommand(CLI::App& app);        // serve (the OpenAI-compatible server)
void AddBenchCommand(CLI::App& app);        // bench (serving benchmark against any server)
void AddRouteCommand(CLI::App& app);        // route (cache-aware router over replicas)

// Prints "error: <message>" to stderr and throws CLI::RuntimeError(code).
[[noreturn]] void Fail(const std::string& message, int code = 1);

}  // namespace kvserve::cli
