// Two small fused ops of a decoder layer, for CPUs: the residual add with the RMSNorm that follows
// it, and SwiGLU's silu(gate) * up.
//
// Why: at batch 1 a small model's decode step costs mostly op calls (a few microseconds each),
// not arithmetic. In plain torch the residual add and its norm are two calls, and the SwiGLU
// activation three (chunk, silu, mul), in every layer; here each is one call, and each reads its
// input once. The layouts match engine/model/model.py: rows of `hidden` (any leading shape), and
// the fused gate_up projection's rows (gate's columns first, then up's).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

namespace {

// Rows per thread's chunk of work: at least this many elements, so a decode step's few rows stay
// on one thread (waking another costs more than the work); a prefill's many rows use both.
int64_t grain_rows(int64_t width) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, width)); }

// (x + residual, rms_norm(x + residual) * weight): the residual stream after a block's output is
// added, and the next block's input. Same arithmetic as torch's rms_norm (fp32).
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dtype() == at::kFloat && residual.dtype() == at::kFloat &&
                  weight.dtype() == at::kFloat,
              "add_rms_norm: float32 only");
  TORCH_CHECK(x.sizes() == residual.sizes(), "add_rms_norm: x and residual must have one shape");
  const int64_t width = weight.numel();
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == width,
              "add_rms_norm: the last dimension must be the weight's length");
  const at::Tensor xc = x.contiguous(), rc = residual.contiguous(), wc = weight.contiguous();
  at::Tensor sum = at::empty_like(xc), normed = at::empty_like(xc);
  const int64_t rows = width == 0 ? 0 : xc.numel() / width;
  const float* xp = xc.data_ptr<float>();
  const float* rp = rc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* sp = sum.data_ptr<float>();
  float* np = normed.data_ptr<float>();
  const float epsilon = static_cast<float>(eps);
  at::parallel_for(0, rows, grain_rows(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* a = xp + r * width;
      const float* b = rp + r * width;
      float* s = sp + r * width;
      float* n = np + r * width;
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < width; ++i) {
        s[i] = a[i] + b[i];
        squares += s[i] * s[i];
      }
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(width) + epsilon);
#pragma omp simd
      for (int64_t i = 0; i < width; ++i) n[i] = s[i] * inv * wp[i];
    }
  });
  return {sum, normed};
}

// silu(gate) * up for rows of [gate | up] (the fused gate_up projection's output): (..., 2I) ->
// (..., I). exp's argument is capped so a very negative gate gives 0, never inf / inf (the
// library is built with -ffast-math, which assumes no infinities).
at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dtype() == at::kFloat, "silu_mul: float32 only");
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "silu_mul: the last dimension must hold gate and up, of one width each");
  const at::Tensor x = gate_up.contiguous();
  const int64_t width = x.size(-1) / 2;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = width;
  at::Tensor out = at::empty(sizes, x.options());
  const int64_t rows = width == 0 ? 0 : out.numel() / width;
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, grain_rows(2 * width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = xp + r * 2 * width;
      const float* up = gate + width;
      float* o = op + r * width;
#pragma omp simd
      for (int64_t i = 0; i < width; ++i) {
        const float g = gate[i];
        o[i] = g / (1.f + std::exp(std::min(-g, 80.f))) * up[i];
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(engine_cpu, m) {
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.impl("add_rms_norm", c10::DispatchKey::CPU, &add_rms_norm);
  m.impl("silu_mul", c10::DispatchKey::CPU, &silu_mul);
}
