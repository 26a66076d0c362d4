// Cephes' expf polynomial over vectors, shared by the attention kernels (ops/attention_kernel.h)
// and the elementwise ops (ops/simd.h). Internal to ops/.
#pragma once

#include <cstring>

namespace kvserve {

// e^x lane by lane for x in [-87, 88] (the caller clamps): x = n ln 2 + r with |r| <= ln 2 / 2,
// e^r by Cephes' degree-7 polynomial (within about 1 ulp of expf), 2^n put into the exponent
// bits. V: a float vector; I: the int32 vector of the same size; fma(a, b, c): a * b + c rounded
// as the caller wants it (the attention kernels fuse explicitly); splat(c): the vector of c.
template <typename V, typename I, typename Fma, typename Splat>
inline V ExpPoly(V x, Fma&& fma, Splat&& splat) {
  const V magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const V t = fma(x, splat(1.44269504088896341f), magic);
  const V n = t - magic;
  V r = fma(n, splat(-0.693359375f), x);  // ln 2 in two parts, the first exact in a few bits
  r = fma(n, splat(2.12194440e-4f), r);
  V p = splat(1.9875691500e-4f);
  p = fma(p, r, splat(1.3981999507e-3f));
  p = fma(p, r, splat(8.3334519073e-3f));
  p = fma(p, r, splat(4.1665795894e-2f));
  p = fma(p, r, splat(1.6666665459e-1f));
  p = fma(p, r, splat(5.0000001201e-1f));
  p = fma(p, r * r, r + 1.0f);
  I ti;
  std::memcpy(&ti, &t, sizeof(ti));
  const I pow2 = ((ti - 0x4B400000) + 127) << 23;  // t's integer n, biased, as exponent bits
  V scale;
  std::memcpy(&scale, &pow2, sizeof(scale));
  return p * scale;
}

}  // namespace kvserve
