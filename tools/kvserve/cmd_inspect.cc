// `kvserve inspect FILE [--json]`: prints a GGUF file's header, metadata and tensor table.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/gguf_file.h"
#include "kvserve/commands.h"

namespace kvserve::cli {
namespace {

constexpr size_t kMaxJsonArrayItems = 16;
constexpr size_t kMaxTextArrayItems = 8;

struct InspectOptions {
  std::string path;
  bool json = false;
};

std::string TypeLabel(const GgufValue& v) {
  if (const GgufArray* a = v.AsArray()) {
    return fmt::format("array[{}]", GgufValueTypeName(a->elem_type));
  }
  return std::string(GgufValueTypeName(v.type));
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Scalars keep their JSON type; arrays longer than kMaxJsonArrayItems become a summary object.
nlohmann::ordered_json ValueToJson(const GgufValue& v) {
  if (const GgufArray* a = v.AsArray()) {
    if (a->items.size() > kMaxJsonArrayItems) {
      return {{"elem_type", GgufValueTypeName(a->elem_type)}, {"count", a->items.size()}};
    }
    nlohmann::ordered_json items = nlohmann::ordered_json::array();
    for (const GgufValue& item : a->items) items.push_back(ValueToJson(item));
    return items;
  }
  if (const std::string* s = v.AsString()) return *s;
  if (std::optional<bool> b = v.AsBool()) return *b;
  if (v.type == GgufValueType::kFloat32 || v.type == GgufValueType::kFloat64) {
    return *v.AsFloat();
  }
  if (std::optional<int64_t> i = v.AsInt()) return *i;
  if (std::optional<uint64_t> u = v.AsUint()) return *u;
  return nullptr;
}

struct Totals {
  int64_t parameters = 0;
  uint64_t bytes = 0;
};

Totals SumTensors(const GgufFile& file) {
  Totals t;
  for (const GgufTensorInfo& info : file.tensors()) {
    t.parameters += info.num_elements();
    t.bytes += info.size_bytes;
  }
  return t;
}

void PrintJson(const GgufFile& file) {
  nlohmann::ordered_json out;
  out["version"] = file.version();
  out["alignment"] = file.alignment();
  out["file_size"] = file.file_size();
  nlohmann::ordered_json metadata = nlohmann::ordered_json::array();
  for (const std::string& key : file.metadata_order()) {
    const GgufValue& v = *file.Find(key);
    metadata.push_back({{"key", key}, {"type", TypeLabel(v)}, {"value", ValueToJson(v)}});
  }
  out["metadata"] = std::move(metadata);
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const GgufTensorInfo& t : file.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"type", Traits(t.type).name},
                       {"dims", t.dims},
                       {"offset", t.offset},
                       {"bytes", t.size_bytes}});
  }
  out["tensors"] = std::move(tensors);
  const Totals totals = SumTensors(file);
  out["total_parameters"] = totals.parameters;
  out["total_bytes"] = totals.bytes;
  fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

void PrintText(const GgufFile& file) {
  fmt::print("GGUF version {}, alignment {}, {} bytes\n", file.version(), file.alignment(),
             file.file_size());
  size_t key_width = 3;
  for (const std::string& key : file.metadata_order()) key_width = std::max(key_width, key.size());
  fmt::print("\nmetadata ({} keys):\n", file.metadata_order().size());
  for (const std::string& key : file.metadata_order()) {
    const GgufValue& v = *file.Find(key);
    fmt::print("  {:<{}}  {:<15}  {}\n", key, key_width, TypeLabel(v),
               v.ToDisplayString(kMaxTextArrayItems));
  }
  size_t name_width = 4;
  for (const GgufTensorInfo& t : file.tensors()) name_width = std::max(name_width, t.name.size());
  fmt::print("\ntensors ({}):\n", file.tensors().size());
  fmt::print("  {:<{}}  {:<5}  {:<24}  {:>12}  {:>12}\n", "name", name_width, "type", "dims",
             "offset", "bytes");
  for (const GgufTensorInfo& t : file.tensors()) {
    fmt::print("  {:<{}}  {:<5}  {:<24}  {:>12}  {:>12}\n", t.name, name_width,
               Traits(t.type).name, DimsString(t.dims), t.offset, t.size_bytes);
  }
  const Totals totals = SumTensors(file);
  fmt::print("\ntotal: {} parameters, {} bytes of tensor data ({:.2f} MiB)\n", totals.parameters,
             totals.bytes, static_cast<double>(totals.bytes) / (1024.0 * 1024.0));
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Print a GGUF file's version, metadata and tensor table");
  cmd->add_option("file", options->path, "GGUF file")->required();
  cmd->add_flag("--json", options->json, "Print machine-readable JSON");
  cmd->callback([options] {
    Result<GgufFile> file = GgufFile::Open(options->path);
    if (!file.ok()) Fail(file.status().ToString());
    if (options->json) {
      PrintJson(*file);
    } else {
      PrintText(*file);
    }
  });
}

}  // namespace kvserve::cli
