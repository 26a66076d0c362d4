// GgufFile: loading (mmap or in-memory bytes) and the typed metadata getters. The parser proper
// is in gguf_parser.cc.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace kvserve {

// Owns the file image: either a read-only private mapping or a vector of bytes.
struct GgufFile::Mapping {
  void* addr = nullptr;
  size_t length = 0;
  std::vector<uint8_t> bytes;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, length);
  }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

void GgufFile::ReleasePages(const uint8_t* data, uint64_t bytes) const {
  if (mapping_ == nullptr || mapping_->addr == nullptr || bytes == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (begin < end) {
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the parser rejected products that overflow
  return n;
}

Result<GgufFile> GgufFile::Open(const std::string& path, bool populate) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = fmt::format("cannot open GGUF file '{}': {}", path, std::strerror(err));
    return err == ENOENT ? NotFound(msg) : IoError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(fmt::format("'{}' is not a regular file", path));
  }
  GgufFile file;
  file.mapping_ = std::make_unique<Mapping>();
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > 0) {
    void* addr =
        ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return IoError(fmt::format("cannot mmap '{}': {}", path, std::strerror(err)));
    }
    file.mapping_->addr = addr;
    file.mapping_->length = size;
    file.base_ = static_cast<const uint8_t*>(addr);
  }
  ::close(fd);
  file.size_ = size;
  if (Status s = file.Parse(); !s.ok()) {
    return Status(s.code(), fmt::format("{}: {}", path, s.message()));
  }
  return file;
}

Result<GgufFile> GgufFile::FromBytes(std::vector<uint8_t> bytes) {
  GgufFile file;
  file.mapping_ = std::make_unique<Mapping>();
  file.mapping_->bytes = std::move(bytes);
  file.base_ = file.mapping_->bytes.data();
  file.size_ = file.mapping_->bytes.size();
  KV_RETURN_IF_ERROR(file.Parse());
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status MissingKey(std::string_view key) {
  return NotFound(fmt::format("GGUF metadata key '{}' is missing", key));
}

Status WrongType(std::string_view key, const GgufValue& v, std::string_view expected) {
  std::string actual(GgufValueTypeName(v.type));
  if (const GgufArray* a = v.AsArray()) {
    actual = fmt::format("array of {}", GgufValueTypeName(a->elem_type));
  }
  return InvalidArgument(
      fmt::format("GGUF metadata key '{}' has type {}, expected {}", key, actual, expected));
}

// Converts every item of the array under `key` with `convert` (returning optional<T>).
template <typename T, typename Convert>
Result<std::vector<T>> ConvertArray(const GgufValue* v, std::string_view key,
                                    std::string_view expected, Convert convert) {
  if (v == nullptr) return MissingKey(key);
  const GgufArray* array = v->AsArray();
  if (array == nullptr) return WrongType(key, *v, expected);
  std::vector<T> out;
  out.reserve(array->items.size());
  for (size_t i = 0; i < array->items.size(); ++i) {
    std::optional<T> item = convert(array->items[i]);
    if (!item.has_value()) {
      return InvalidArgument(fmt::format("GGUF metadata key '{}': item {} ({}) is not {}", key, i,
                                         array->items[i].ToDisplayString(), expected));
    }
    out.push_back(std::move(*item));
  }
  return out;
}

}  // namespace

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return MissingKey(key);
  if (const std::string* s = v->AsString()) return *s;
  return WrongType(key, *v, "string");
}

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return MissingKey(key);
  if (std::optional<uint64_t> u = v->AsUint()) return *u;
  return WrongType(key, *v, "a non-negative integer");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return MissingKey(key);
  if (std::optional<int64_t> i = v->AsInt()) return *i;
  return WrongType(key, *v, "an integer that fits int64");
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return MissingKey(key);
  if (std::optional<double> d = v->AsFloat()) return *d;
  return WrongType(key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return MissingKey(key);
  if (std::optional<bool> b = v->AsBool()) return *b;
  return WrongType(key, *v, "bool");
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  return ConvertArray<std::string>(Find(key), key, "an array of strings",
                                   [](const GgufValue& item) -> std::optional<std::string> {
                                     const std::string* s = item.AsString();
                                     if (s == nullptr) return std::nullopt;
                                     return *s;
                                   });
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  return ConvertArray<double>(Find(key), key, "an array of numbers",
                              [](const GgufValue& item) { return item.AsFloat(); });
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  return ConvertArray<int64_t>(Find(key), key, "an array of integers",
                               [](const GgufValue& item) { return item.AsInt(); });
}

}  // namespace kvserve
