// A few rows of activations times a weight matrix as stored (out x in, row-major), for CPUs: the
// decode step's products, one call each.
//
// Why: at batch 1 a decode step of a small model makes 25 products of one row by a matrix that
// streams from cache in microseconds; the library ways of laying them out (engine/model/
// matmul_plan.py) take three to five op calls each, and an op call costs a few microseconds too.
// At 8 to 64 rows the libraries' kernels, made for large matrices, reach a fraction of the
// machine's arithmetic peak, so a decode step of 16 sequences costs several times what streaming
// its weights does. It is one of the plan's variants ("cpp"): timed against the others, used where
// fastest.
//
// How: each weight row and input row is contiguous along the inner dimension K, so the kernel
// takes dot products, a tile of MR input rows by NR = 4 weight rows at a time, MR x 4 vector sums
// held in registers and summed across their lanes once at the end of the tile. A block of four
// weight rows is read from memory once and kept in L1 while every group of MR input rows passes
// over it; where K is long, K is cut into tiles (TILE_K) so that the weight rows' tile and one
// group's input tile both stay in L1 (the input rows themselves stay in L2), the partial sums
// added into the output from one tile to the next; the next tile is prefetched while this one is
// multiplied (Ahead). The register tile is as large as the vector
// registers allow: 4 x 4 with AVX-512's 32 registers (16 sums, 4 input vectors, 1 weight vector),
// 3 x 4 with AVX2's 16. Sixteen (or twelve) independent sums keep both multiply-add units busy,
// and each vector loaded feeds three or four multiply-adds, so the loads no longer set the pace.
// The library is built with -march=native: the AVX-512 path where the compiler enables it, else
// AVX2 with FMA, else the portable loops the compiler vectorizes for itself (two rows x four).
// The output columns are cut into one contiguous range per thread, so each core streams its own
// part of the matrix.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace {

// Inner-dimension tile: four weight rows' and four input rows' tiles of 768 floats are 24 KiB,
// half of a 48 KiB L1 (a 32 KiB one still holds the weight tile, the one reused most). K up to
// MAX_UNTILED_K is taken whole (the small model's 768), longer K in equal tiles of about TILE_K.
constexpr int64_t TILE_K = 768;
constexpr int64_t MAX_UNTILED_K = 1024;

// The weight tile to be read after this one, and which of its rows this pass prefetches while it
// multiplies. Without it, the first row group of each weight tile waits on memory while the
// multiply-add units idle, and the later groups (which find the tile in L1) compute while the
// memory idles; with the next tile's rows prefetched, spread over the current tile's passes,
// memory and arithmetic overlap.
struct Ahead {
  const float* rows[4] = {};  // the next tile's rows, at its first column
  int count = 0;              // how many of them this pass prefetches
  int64_t length = 0;         // the next tile's length
};

#if defined(__AVX512F__)

constexpr const char* kPath = "avx512";
constexpr int MR = 4;  // input rows a tile
constexpr int64_t VW = 16;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
// The first n (< VW) floats at p, zeros after: the masked lanes are never read.
inline Vec load_part(const float* p, int64_t n) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline __m256 halves(Vec v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline float sum(Vec v) { return _mm512_reduce_add_ps(v); }

#elif defined(__AVX2__) && defined(__FMA__)

constexpr const char* kPath = "avx2";
constexpr int MR = 3;
constexpr int64_t VW = 8;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
alignas(32) constexpr int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0, 0, 0, 0, 0, 0, 0, 0};
inline Vec load_part(const float* p, int64_t n) {
  return _mm256_maskload_ps(
      p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n)));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 halves(Vec v) { return v; }
inline float sum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#else

constexpr const char* kPath = "portable";
constexpr int MR = 2;

#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

// Keeps a loaded vector in a register: without it the compiler folds the load into each of the
// multiply-adds that use it (one memory operand each), loading every vector three or four times,
// and the loads, not the multiply-adds, set the pace again.
inline void in_register(Vec& v) { asm("" : "+v"(v)); }

// The four sums of a, b, c, d's lanes, as one 4-float vector.
inline __m128 sum4(Vec a, Vec b, Vec c, Vec d) {
  const __m256 ab = _mm256_hadd_ps(halves(a), halves(b));
  const __m256 cd = _mm256_hadd_ps(halves(c), halves(d));
  const __m256 s = _mm256_hadd_ps(ab, cd);  // per 128-bit half: a, b, c, d's partial sums
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// out[i * ldo + j] (+)= sum over k in [k0, k1) of x[i * K + k] * w[j * K + k], for R input rows
// and C weight rows (R <= MR, C <= 4): the first K tile stores, later ones add.
template <int R, int C>
inline void tile(const float* x, const float* w, int64_t K, int64_t k0, int64_t k1, float* out,
                 int64_t ldo, bool add, const Ahead& ahead) {
  Vec acc[R][C];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) acc[i][j] = zero();
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    Vec xv[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      xv[i] = load(x + i * K + k);
      if constexpr (C > 1) in_register(xv[i]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      Vec wv = load(w + j * K + k);
      if constexpr (R > 1) in_register(wv);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i][j] = fma(xv[i], wv, acc[i][j]);
    }
  };
  int64_t k = k0;
  if (ahead.count > 0) {  // the next tile's lines, one 64-byte line a row each 16 floats
    const int64_t ahead_end = k0 + std::min(ahead.length, k1 - k0) / 16 * 16;
    for (; k < ahead_end; k += 16) {
      for (int r = 0; r < ahead.count; ++r) _mm_prefetch(ahead.rows[r] + (k - k0), _MM_HINT_T0);
#pragma GCC unroll 2
      for (int64_t v = 0; v < 16; v += VW) step(k + v);
    }
  }
  for (; k + VW <= k1; k += VW) step(k);  // no line left to prefetch, or none asked for
  if (k < k1) {  // a part vector: only at the end of K (tiles are whole vectors)
    const int64_t n = k1 - k;
    Vec xv[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) xv[i] = load_part(x + i * K + k, n);
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      const Vec wv = load_part(w + j * K + k, n);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i][j] = fma(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float* o = out + i * ldo;
    if constexpr (C == 4) {
      __m128 s = sum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      if (add) s = _mm_add_ps(s, _mm_loadu_ps(o));
      _mm_storeu_ps(o, s);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) o[j] = (add ? o[j] : 0.f) + sum(acc[i][j]);
    }
  }
}

#else

// The portable loops: R (<= 2) input rows by C (<= 4) weight rows, sums the compiler vectorizes
// (omp simd reductions), eight independent ones at two rows by four.
template <int R, int C>
inline void tile(const float* x, const float* w, int64_t K, int64_t k0, int64_t k1, float* out,
                 int64_t ldo, bool add, const Ahead&) {
  const float* x1 = R > 1 ? x + K : x;
  const float* w1 = C > 1 ? w + K : w;
  const float* w2 = C > 2 ? w + 2 * K : w;
  const float* w3 = C > 3 ? w + 3 * K : w;
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, b0 = 0.f, b1 = 0.f, b2 = 0.f, b3 = 0.f;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
  for (int64_t k = k0; k < k1; ++k) {
    a0 += x[k] * w[k];
    if (C > 1) a1 += x[k] * w1[k];
    if (C > 2) a2 += x[k] * w2[k];
    if (C > 3) a3 += x[k] * w3[k];
    if (R > 1) {
      b0 += x1[k] * w[k];
      if (C > 1) b1 += x1[k] * w1[k];
      if (C > 2) b2 += x1[k] * w2[k];
      if (C > 3) b3 += x1[k] * w3[k];
    }
  }
  const float sums[2][4] = {{a0, a1, a2, a3}, {b0, b1, b2, b3}};
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) out[i * ldo + j] = (add ? out[i * ldo + j] : 0.f) + sums[i][j];
}

#endif

template <int C>
inline void tile_rows(int64_t rows, const float* x, const float* w, int64_t K, int64_t k0,
                      int64_t k1, float* out, int64_t ldo, bool add, const Ahead& ahead) {
  switch (rows) {
    case 1: return tile<1, C>(x, w, K, k0, k1, out, ldo, add, ahead);
    case 2: if constexpr (MR >= 2) return tile<2, C>(x, w, K, k0, k1, out, ldo, add, ahead); break;
    case 3: if constexpr (MR >= 3) return tile<3, C>(x, w, K, k0, k1, out, ldo, add, ahead); break;
    case 4: if constexpr (MR >= 4) return tile<4, C>(x, w, K, k0, k1, out, ldo, add, ahead); break;
  }
}

// Weight rows [n0, n0 + C) against every input row: K tile by K tile, each tile of the weight
// rows read by every group of MR input rows while it is in L1, and the next tile (the next K
// tile of these rows, else the first of the next block, up to this thread's last row n_end)
// prefetched across the groups' passes: row r by group r * groups / 4.
template <int C>
void weight_block(const float* x, int64_t M, const float* w, int64_t K, int64_t tile_k,
                  float* out, int64_t N, int64_t n0, int64_t n_end) {
  const int64_t groups = (M + MR - 1) / MR;
  for (int64_t k0 = 0; k0 < K; k0 += tile_k) {
    const int64_t k1 = std::min(K, k0 + tile_k);
    const bool last = k1 == K;
    const int64_t next_n = last ? n0 + C : n0, next_k = last ? 0 : k1;
    // One row streams the weights, which the hardware prefetcher does alone.
    const int next_rows = M == 1 ? 0
        : static_cast<int>(last ? std::min<int64_t>(4, n_end - next_n) : C);
    for (int64_t m = 0, g = 0; m < M; m += MR, ++g) {
      Ahead ahead;
      ahead.length = std::min(K, next_k + tile_k) - next_k;
      for (int r = 0; r < next_rows; ++r) {
        if (r * groups / 4 == g) ahead.rows[ahead.count++] = w + (next_n + r) * K + next_k;
      }
      tile_rows<C>(std::min<int64_t>(MR, M - m), x + m * K, w + n0 * K, K, k0, k1,
                   out + m * N + n0, N, k0 > 0, ahead);
    }
  }
}

// The K tile: K itself up to MAX_UNTILED_K, else K in equal parts of about TILE_K floats, each a
// whole number of vectors (the last part takes what is left).
int64_t tile_length(int64_t K) {
  if (K <= MAX_UNTILED_K) return std::max<int64_t>(K, 1);
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  const int64_t step = VW;
#else
  const int64_t step = 16;
#endif
  const int64_t parts = (K + TILE_K - 1) / TILE_K;
  return ((K + parts - 1) / parts + step - 1) / step * step;
}

}  // namespace

namespace engine_kernels {  // called from the library's other sources too (fused_ops.cpp)

at::Tensor rows_matmul(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dtype() == at::kFloat && weight.dtype() == at::kFloat, "rows_matmul: float32 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
              "rows_matmul: x (M, in) and weight (out, in)");
  TORCH_CHECK(weight.is_contiguous(), "rows_matmul: the weight must be contiguous");
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = weight.size(0);
  at::Tensor out = at::empty({M, N}, xc.options());
  if (M == 0 || N == 0) return out;
  if (K == 0) return out.zero_();
  const float* xp = xc.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // One row has no reuse to keep in L1: it streams each weight row whole.
  const int64_t tile_k = M == 1 ? K : tile_length(K);
  // At least 64 output columns per thread: a smaller matrix is not worth waking another for.
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    int64_t n = begin;
    for (; n + 4 <= end; n += 4) weight_block<4>(xp, M, wp, K, tile_k, op, N, n, end);
    for (; n < end; ++n) weight_block<1>(xp, M, wp, K, tile_k, op, N, n, end);
  });
  return out;
}

// Which of the kernel's code paths this build compiled: "avx512", "avx2" or "portable".
std::string rows_matmul_path() { return kPath; }

}  // namespace engine_kernels

TORCH_LIBRARY_FRAGMENT(engine_cpu, m) {
  m.def("rows_matmul(Tensor x, Tensor weight) -> Tensor");
  m.impl("rows_matmul", c10::DispatchKey::CPU, &engine_kernels::rows_matmul);
  m.def("rows_matmul_path() -> str", &engine_kernels::rows_matmul_path);
}
