// A few rows of activations times a weight matrix as stored (out x in, row-major), for CPUs: the
// decode step's products, one call each.
//
// Why: at batch 1 a decode step of a small model makes 25 products of one row by a matrix that
// streams from cache in microseconds; the library ways of laying them out (engine/model/
// matmul_plan.py) take three to five op calls each, and an op call costs a few microseconds too.
// At 4 to 16 rows the libraries' kernels, made for large matrices, reach about a third of the
// machine's arithmetic peak, so a decode step of 8 or 16 sequences costs two to three times what
// streaming its weights does. Here each block of four weight rows is read once, from memory, for
// all M input rows, which take it two at a time: eight independent sums per step of the inner loop
// (two rows times four weight rows), enough to keep both multiply-add units busy (four sums, one
// input row at a time, wait on the add's latency). The output columns are cut into one contiguous
// range per thread, so both cores stream their own part of the matrix. It is one of the plan's
// variants ("cpp"): timed against the others, used where fastest.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>

namespace {

// Dot products of one input row x (K long) with four consecutive weight rows w: four independent
// sums, so the multiply-adds of different rows overlap instead of each waiting on the last.
inline void dot1x4(const float* x, const float* w, int64_t K, float* out) {
  const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t k = 0; k < K; ++k) {
    s0 += x[k] * w0[k];
    s1 += x[k] * w1[k];
    s2 += x[k] * w2[k];
    s3 += x[k] * w3[k];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

// Two input rows (x, x + K) with four weight rows: eight sums, each weight element loaded once for
// both rows and each input element once for the four weight rows (six loads per eight
// multiply-adds, which AVX2's sixteen vector registers hold: eight sums and six operands).
inline void dot2x4(const float* x, const float* w, int64_t K, float* out0, float* out1) {
  const float *x0 = x, *x1 = x + K;
  const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, b0 = 0.f, b1 = 0.f, b2 = 0.f, b3 = 0.f;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
  for (int64_t k = 0; k < K; ++k) {
    a0 += x0[k] * w0[k];
    a1 += x0[k] * w1[k];
    a2 += x0[k] * w2[k];
    a3 += x0[k] * w3[k];
    b0 += x1[k] * w0[k];
    b1 += x1[k] * w1[k];
    b2 += x1[k] * w2[k];
    b3 += x1[k] * w3[k];
  }
  out0[0] = a0, out0[1] = a1, out0[2] = a2, out0[3] = a3;
  out1[0] = b0, out1[1] = b1, out1[2] = b2, out1[3] = b3;
}

inline float dot1(const float* x, const float* w, int64_t K) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < K; ++k) s += x[k] * w[k];
  return s;
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
  const float* xp = xc.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // At least 64 output columns per thread: a smaller matrix is not worth waking another for.
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    float part[8];
    int64_t n = begin;
    for (; n + 4 <= end; n += 4) {  // four weight rows at a time, each read once for all M rows
      const float* w = wp + n * K;
      int64_t m = 0;
      for (; m + 2 <= M; m += 2) {
        dot2x4(xp + m * K, w, K, part, part + 4);
        for (int r = 0; r < 4; ++r) {
          op[m * N + n + r] = part[r];
          op[(m + 1) * N + n + r] = part[4 + r];
        }
      }
      if (m < M) {
        dot1x4(xp + m * K, w, K, part);
        for (int r = 0; r < 4; ++r) op[m * N + n + r] = part[r];
      }
    }
    for (; n < end; ++n) {
      for (int64_t m = 0; m < M; ++m) op[m * N + n] = dot1(xp + m * K, wp + n * K, K);
    }
  });
  return out;
}

}  // namespace engine_kernels

TORCH_LIBRARY_FRAGMENT(engine_cpu, m) {
  m.def("rows_matmul(Tensor x, Tensor weight) -> Tensor");
  m.impl("rows_matmul", c10::DispatchKey::CPU, &engine_kernels::rows_matmul);
}
