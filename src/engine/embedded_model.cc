#include "engine/embedded_model.h"

// The file is assembled into .rodata by the assembler's .incbin (g++ and clang both pass it
// through), 64-byte aligned so tensor data keeps the alignment GGUF promises. The path comes from
// the build (KVSERVE_EMBEDDED_MODEL); CMake lists the file as a dependency of this object.
#ifndef KVSERVE_EMBEDDED_MODEL
#error "KVSERVE_EMBEDDED_MODEL must name the GGUF file to embed"
#endif

asm(".pushsection .rodata.kvserve_embedded_model, \"a\", @progbits\n"
    ".balign 64\n"
    ".hidden kvserve_embedded_model_begin\n"
    ".globl kvserve_embedded_model_begin\n"
    "kvserve_embedded_model_begin:\n"
    ".incbin \"" KVSERVE_EMBEDDED_MODEL "\"\n"
    ".hidden kvserve_embedded_model_end\n"
    ".globl kvserve_embedded_model_end\n"
    "kvserve_embedded_model_end:\n"
    ".popsection\n");

extern "C" {
extern const uint8_t kvserve_embedded_model_begin[];
extern const uint8_t kvserve_embedded_model_end[];
}

namespace kvserve {

std::span<const uint8_t> EmbeddedModelBytes() {
  return {kvserve_embedded_model_begin, kvserve_embedded_model_end};
}

}  // namespace kvserve
