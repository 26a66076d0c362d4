// The embedded default model: kvserve's own small trained model (models/kvserve-tiny-q8_0.gguf,
// see models/README.md), linked into the binary so that `kvserve run` and `kvserve serve`
// without --model produce readable text with nothing to download.
#pragma once

#include <cstdint>
#include <span>

namespace kvserve {

// The GGUF file's bytes, in read-only memory for the life of the process.
std::span<const uint8_t> EmbeddedModelBytes();

}  // namespace kvserve
