// kvserve: the command-line entry point. Each subcommand lives in its own cmd_*.cc file.
#include <cstdio>

#include "commands.h"

namespace kvserve::cli {

void Fail(const std::string& message, int code) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  throw CLI::RuntimeError(code);
}

}  // namespace kvserve::cli

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM inference engine built around its KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvserve 0.1.0");
  kvserve::cli::AddServeCommand(app);
  kvserve::cli::AddBenchCommand(app);
  kvserve::cli::AddRouteCommand(app);
  kvserve::cli::AddRunCommand(app);
  kvserve::cli::AddMakeModelCommand(app);
  kvserve::cli::AddInspectCommand(app);
  kvserve::cli::AddTokenizeCommands(app);
  kvserve::cli::AddLogitsCommand(app);
  kvserve::cli::AddPerplexityCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
