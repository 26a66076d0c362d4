// Where a subcommand's model comes from: a GGUF path, or the embedded default model when the
// path is empty.
#pragma once

#include <string>

#include "gguf/gguf_file.h"
#include "kvserve/status.h"

namespace kvserve::cli {

Result<GgufFile> OpenModelFile(const std::string& path);

}  // namespace kvserve::cli
