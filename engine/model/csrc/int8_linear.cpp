// Weight-only int8 linear for CPUs: y = x @ (W_int8 * scale[:, None]).T, W stored one int8 per
// weight with one float scale per output row (engine/model/int8.py quantizes).
// Why a kernel of our own: torch's int8 CPU paths (_weight_int8pack_mm, fbgemm's dynamic int8)
// are several times slower than float32 on this AVX2 machine at decode's few rows, though they
// read a quarter of the bytes. Here each 8 weights are widened int8 -> int32 -> fp32 in registers
// and multiplied into up to 4 input rows at once, 2 output rows at a time (8 accumulators), so
// the int8 weights are read from memory once and the arithmetic per weight byte stays small.
// Without AVX2 and FMA the same tiles run as plain loops (correct, not fast).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ENGINE_INT8_AVX2 1
#endif

namespace {

#ifdef ENGINE_INT8_AVX2

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 widen(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Output rows n, n+1 (two = false: n only) for input rows r0 .. r0+RT-1; K a multiple of 8.
template <int RT>
void tile(const float* x, const int8_t* w, const float* scale, float* y, int64_t K, int64_t N,
          int64_t n, int64_t r0, bool two) {
  __m256 a0[RT], a1[RT];
  for (int r = 0; r < RT; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  const int8_t* w0 = w + n * K;
  const int8_t* w1 = two ? w0 + K : w0;
  for (int64_t k = 0; k < K; k += 8) {
    const __m256 v0 = widen(w0 + k), v1 = widen(w1 + k);
    for (int r = 0; r < RT; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + (r0 + r) * K + k);
      a0[r] = _mm256_fmadd_ps(v0, xv, a0[r]);
      a1[r] = _mm256_fmadd_ps(v1, xv, a1[r]);
    }
  }
  for (int r = 0; r < RT; ++r) {
    y[(r0 + r) * N + n] = hsum(a0[r]) * scale[n];
    if (two) y[(r0 + r) * N + n + 1] = hsum(a1[r]) * scale[n + 1];
  }
}
#else
template <int RT>
void tile(const float* x, const int8_t* w, const float* scale, float* y, int64_t K, int64_t N,
          int64_t n, int64_t r0, bool two) {
  for (int64_t o = n; o < n + (two ? 2 : 1); ++o) {
    for (int r = 0; r < RT; ++r) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<float>(w[o * K + k]) * x[(r0 + r) * K + k];
      y[(r0 + r) * N + o] = acc * scale[o];
    }
  }
}
#endif

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && w.size(1) % 8 == 0,
              "int8_linear: x (R, K), w (N, K), K a multiple of 8");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kChar &&
              scale.scalar_type() == at::kFloat, "int8_linear: float32 x, int8 w, float32 scale");
  TORCH_CHECK(scale.dim() == 1 && scale.size(0) == w.size(0), "int8_linear: one scale per row of w");
  const at::Tensor xc = x.contiguous(), wc = w.contiguous(), sc = scale.contiguous();
  const int64_t R = xc.size(0), K = xc.size(1), N = wc.size(0);
  at::Tensor y = at::empty({R, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const int8_t* wp = wc.data_ptr<int8_t>();
  const float* sp = sc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, (N + 1) / 2, 32, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n = 2 * p;
      const bool two = n + 1 < N;
      int64_t r = 0;
      for (; r + 4 <= R; r += 4) tile<4>(xp, wp, sp, yp, K, N, n, r, two);
      switch (R - r) {
        case 3: tile<3>(xp, wp, sp, yp, K, N, n, r, two); break;
        case 2: tile<2>(xp, wp, sp, yp, K, N, n, r, two); break;
        case 1: tile<1>(xp, wp, sp, yp, K, N, n, r, two); break;
        default: break;
      }
    }
  });
  return y;
}

}  // namespace

TORCH_LIBRARY(engine_int8, m) { m.def("int8_linear(Tensor x, Tensor w, Tensor scale) -> Tensor"); }
TORCH_LIBRARY_IMPL(engine_int8, CPU, m) { m.impl("int8_linear", &int8_linear); }
