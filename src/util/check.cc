#include "util/check.h"

namespace kvserve::detail {

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s%s%s\n", file, line, cond, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvserve::detail
