#include "model_source.h"

#include "engine/synthetic_model.h"

namespace kvserve::cli {

Result<GgufFile> OpenModelFile(const std::string& path) {
  if (!path.empty()) return GgufFile::Open(path, /*populate=*/true);
  KV_ASSIGN_OR_RETURN(GgufWriter writer, BuildSyntheticModel(DefaultModelSpec()));
  KV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.WriteToBytes());
  return GgufFile::FromBytes(std::move(bytes));
}

}  // namespace kvserve::cli
