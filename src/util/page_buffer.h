// PageBuffer: a move-only run of anonymous pages for large, long-lived arrays (repacked model
// weights). Its start is aligned to 2 MiB and Linux is asked to back it with transparent huge
// pages (MADV_HUGEPAGE): streaming gigabytes through 4 KiB pages costs a page walk every 4 KiB.
// Zero-filled; pages are committed as they are first written.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace kvserve {

class PageBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  PageBuffer() = default;
  explicit PageBuffer(size_t bytes) {
    if (bytes == 0) return;
    // Over-allocate by one huge page and trim both ends to the aligned run.
    const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* raw = ::mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (start > base) ::munmap(raw, start - base);
    if (const uintptr_t end = base + length + kHugePage; end > start + length) {
      ::munmap(reinterpret_cast<void*>(start + length), end - (start + length));
    }
    data_ = reinterpret_cast<uint8_t*>(start);
    size_ = length;
    ::madvise(data_, size_, MADV_HUGEPAGE);  // advice: refused on kernels without THP
  }
  ~PageBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  PageBuffer(PageBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) ::munmap(data_, size_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // the bytes asked for, rounded up to 2 MiB

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvserve
