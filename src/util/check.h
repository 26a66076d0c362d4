// CHECK macros for broken invariants (never for user or file errors: those return Status).
// A failed check prints the condition, the location and the formatted message, then aborts.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace kvserve::detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace kvserve::detail

// KV_CHECK(cond) or KV_CHECK(cond, "fmt {}", args...).
#define KV_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (__builtin_expect(!(cond), 0))                                                    \
      ::kvserve::detail::CheckFailed(__FILE__, __LINE__, #cond,                          \
                                     ::kvserve::detail::CheckMessage(__VA_ARGS__));      \
  } while (0)

#define KV_CHECK_OP(a, op, b)                                                         \
  do {                                                                                \
    const auto& kv_a_ = (a);                                                          \
    const auto& kv_b_ = (b);                                                          \
    if (__builtin_expect(!(kv_a_ op kv_b_), 0))                                       \
      ::kvserve::detail::CheckFailed(__FILE__, __LINE__, #a " " #op " " #b,           \
                                     fmt::format("{} vs {}", kv_a_, kv_b_));          \
  } while (0)
#define KV_CHECK_EQ(a, b) KV_CHECK_OP(a, ==, b)
#define KV_CHECK_NE(a, b) KV_CHECK_OP(a, !=, b)
#define KV_CHECK_LT(a, b) KV_CHECK_OP(a, <, b)
#define KV_CHECK_LE(a, b) KV_CHECK_OP(a, <=, b)
#define KV_CHECK_GT(a, b) KV_CHECK_OP(a, >, b)
#define KV_CHECK_GE(a, b) KV_CHECK_OP(a, >=, b)

#ifdef NDEBUG
#define KV_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define KV_DCHECK(cond, ...) KV_CHECK(cond __VA_OPT__(, ) __VA_ARGS__)
#endif

namespace kvserve::detail {
inline std::string CheckMessage() { return {}; }
template <typename... Args>
std::string CheckMessage(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace kvserve::detail
