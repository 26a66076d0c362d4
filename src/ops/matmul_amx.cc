// AMX-INT8 tile kernel for packed Q8_0 weights (ops/matmul_packed.h). Compiled with AVX-512 and
// AMX target flags; InitAmx installs it only after a run-time CPU check and once Linux has
// granted the process the tile state.
//
// NOTE: a tile product sums a block's 32 columns for 16 tokens x 16 rows at once: C = A * B with
// A the tokens' activation bytes (16 rows of 32 signed bytes, read in place at the activations'
// row stride) and B the group's block as packed (8 rows of 64 unsigned bytes), TDPBSUD. C holds
// sum_j q_j * (w_j + 128), the same exact integer as the VNNI kernel's, and the same float
// epilogue follows, so AMX and VNNI results are bit-identical (tested where AMX exists).
// GCC 12's AVX-512 headers build "undefined" vectors from uninitialised locals, which
// -Wuninitialized reports (as in matmul_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "ops/matmul_kernels.h"
#include "ops/matmul_packed.h"
#include "util/log.h"

namespace kvserve::kernels {
namespace {

using Format = packed::Q8_0;
constexpr int64_t kTileTokens = 16;

// Palette 1: tiles 0-1 activations (16 x 32 bytes), 2-3 weights (8 x 64), 4-5 sums (16 x 64).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {32, 32, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 8, 8, 16, 16};
};

// The integer sums of one block (C as stored: [token][row]) into the accumulators.
inline void Accumulate(const int32_t (&c)[16][16], const uint8_t* group, const ActQ8_0& x,
                       int64_t nb, int64_t t0, int64_t b, __m512 (&acc)[16]) {
  const __m512 dw = _mm512_cvtph_ps(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(packed::BlockScales<Format>(group, b))));
  for (int t = 0; t < 16; ++t) {
    const __m512i s = _mm512_add_epi32(
        _mm512_load_si512(c[t]), _mm512_set1_epi32(-Format::kOffset * x.sum[(t0 + t) * nb + b]));
    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[(t0 + t) * nb + b]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t]);
  }
}

// 16 tokens x one group of 16 rows. Blocks go through the tiles two at a time; the sums of one
// pair are accumulated while the tiles compute the next (two buffers).
void Tile(const uint8_t* group, int64_t nb, const ActQ8_0& x, int64_t t0, float* y,
          int64_t y_stride, __mmask16 rows) {
  alignas(64) int32_t c[2][2][16][16];
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const int8_t* xa = x.q + t0 * x.cols;
  const auto stride = static_cast<long>(x.cols);
  int64_t pending = -1;  // first block of the pair waiting in c[buffer of pending]
  int buf = 0;
  for (int64_t b = 0; b < nb; b += 2) {
    _tile_loadd(0, xa + b * 32, stride);
    _tile_loadd(2, packed::BlockValues<Format>(group, b), 64);
    _tile_zero(4);
    _tile_dpbsud(4, 0, 2);
    if (b + 1 < nb) {
      _tile_loadd(1, xa + (b + 1) * 32, stride);
      _tile_loadd(3, packed::BlockValues<Format>(group, b + 1), 64);
      _tile_zero(5);
      _tile_dpbsud(5, 1, 3);
    }
    _tile_stored(4, c[buf][0], 64);
    if (b + 1 < nb) _tile_stored(5, c[buf][1], 64);
    if (pending >= 0) {
      Accumulate(c[buf ^ 1][0], group, x, nb, t0, pending, acc);
      Accumulate(c[buf ^ 1][1], group, x, nb, t0, pending + 1, acc);  // pending + 1 < b
    }
    pending = b;
    buf ^= 1;
  }
  if (pending >= 0) {
    Accumulate(c[buf ^ 1][0], group, x, nb, t0, pending, acc);
    if (pending + 1 < nb) Accumulate(c[buf ^ 1][1], group, x, nb, t0, pending + 1, acc);
  }
  for (int t = 0; t < 16; ++t) _mm512_mask_storeu_ps(y + t * y_stride, rows, acc[t]);
}

void PackedQ8_0PanelAmx(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  const WeightMatrix& w = *a.w;
  const int64_t nb = w.cols / 32;
  packed::ForChunksAndGroups<Format>(
      w, a.num_tokens, r0, r1,
      [&](const uint8_t* group, int64_t r, int64_t n, int64_t c0, int64_t c1) {
        const __mmask16 rows = static_cast<__mmask16>((1u << n) - 1);
        for (int64_t t = c0; t < c1; t += kTileTokens) {
          Tile(group, nb, x, t, a.y + t * w.rows + r, w.rows, rows);
        }
      });
  _tile_release();
}

// Asks Linux for the AMX tile state (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it
// the first tile instruction raises SIGILL.
bool GrantTiles() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amx_tile = (edx >> 24) & 1u, amx_int8 = (edx >> 25) & 1u;
  if (!amx_tile || !amx_int8) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    LogLine(LogLevel::kWarning,
            fmt::format("the CPU has AMX but Linux refused the process its tile state ({}); "
                        "matmuls use AVX-512 VNNI",
                        std::strerror(errno)));
    return false;
  }
  return true;
}

}  // namespace

bool InitAmx(KernelTable& table) {
  if (std::string_view(table.isa) != "avx512-vnni" || table.q8_0_packed == nullptr) return false;
  static const bool granted = GrantTiles();
  if (!granted) return false;
  table.isa = "avx512-amx";
  table.q8_0_packed_tiles = &PackedQ8_0PanelAmx;
  return true;
}

}  // namespace kvserve::kernels
