// libFuzzer entry point for the GGUF reader: parse an arbitrary image and, when it is accepted,
// touch every byte of every tensor and dequantize each tensor's first row. Any crash, sanitizer
// report or out-of-bounds read is a bug in the reader's validation.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  Result<GgufFile> file = GgufFile::FromBytes(std::vector<uint8_t>(data, data + size));
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const std::string& key : file->metadata_order()) {
    sink = sink ^ static_cast<uint8_t>(file->Find(key)->ToDisplayString(4).size());
  }
  std::vector<float> row;
  for (const GgufTensorInfo& t : file->tensors()) {
    uint8_t acc = 0;
    for (uint64_t i = 0; i < t.size_bytes; ++i) acc ^= t.data[i];
    sink = sink ^ acc;
    const int64_t cols = t.dims[0];
    if (cols > (int64_t{1} << 20)) continue;  // keep the fuzzer fast; the bytes were touched
    row.resize(static_cast<size_t>(cols));
    DequantizeRow(t.type, t.data, row.data(), cols);
  }
  (void)sink;
  return 0;
}
