// One software prefetch that the compiler keeps. Internal to ops/.
#pragma once

namespace kvserve {

// Asks for the cache line at p (into every level, as prefetcht0). NOTE: not __builtin_prefetch or
// _mm_prefetch: GCC's interprocedural analysis takes a function whose only effect is a prefetch for
// one without side effects and deletes its calls. That removed every prefetch of the attention
// kernel (PrefetchSlots, which only prefetches) until this helper replaced it; the statement here
// is volatile, so it stays wherever it is called from.
inline void PrefetchLine(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace kvserve
