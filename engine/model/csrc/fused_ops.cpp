// Fused ops of a decoder layer, for CPUs: the residual add with the RMSNorm that follows it,
// SwiGLU's silu(gate) * up, and a whole decode-only step of the model in one call.
//
// Why: at batch 1 a small model's decode step costs mostly op calls (a few microseconds each),
// not arithmetic. In plain torch the residual add and its norm are two calls, and the SwiGLU
// activation three (chunk, silu, mul), in every layer; here each is one call, and each reads its
// input once. `decode_model` runs a whole decode-only step, from token ids to logits, the same
// arithmetic, in one call: the Python around each layer (its arguments, its ops' dispatch) costs
// more than tiny's arithmetic at batch 1. Its products follow the measured plan's layout for the
// step's row count (`product`; the codes are engine/model/matmul_plan.py's STEP_PRODUCTS), so the
// step is one call from Python whichever layout the plan chose. The layouts match
// engine/model/model.py: rows of `hidden` (any leading shape), and the fused gate_up
// projection's rows (gate's columns first, then up's).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
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

// RMS norm of each row of x, plus residual first where one is given (residual may be undefined):
// returns (x + residual, or x itself; its norm times weight). Same arithmetic as torch's
// rms_norm (fp32).
std::tuple<at::Tensor, at::Tensor> norm_rows(const at::Tensor& x, const at::Tensor& residual,
                                             const at::Tensor& weight, double eps) {
  const bool add = residual.defined();
  TORCH_CHECK(x.dtype() == at::kFloat && weight.dtype() == at::kFloat &&
                  (!add || residual.dtype() == at::kFloat),
              "add_rms_norm: float32 only");
  TORCH_CHECK(!add || x.sizes() == residual.sizes(),
              "add_rms_norm: x and residual must have one shape");
  const int64_t width = weight.numel();
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == width,
              "add_rms_norm: the last dimension must be the weight's length");
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  const at::Tensor rc = add ? residual.contiguous() : xc;
  at::Tensor sum = add ? at::empty_like(xc) : xc, normed = at::empty_like(xc);
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
      if (add) {
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < width; ++i) {
          s[i] = a[i] + b[i];
          squares += s[i] * s[i];
        }
      } else {
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < width; ++i) squares += a[i] * a[i];
      }
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(width) + epsilon);
#pragma omp simd
      for (int64_t i = 0; i < width; ++i) n[i] = s[i] * inv * wp[i];
    }
  });
  return {sum, normed};
}

}  // namespace

namespace engine_kernels {

// Defined in rows_matmul.cpp and paged_decode.cpp (this library).
at::Tensor rows_matmul(const at::Tensor& x, const at::Tensor& weight);
at::Tensor decode_step(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& slots, at::Tensor k_cache, at::Tensor v_cache,
                       const at::Tensor& block_tables, const at::Tensor& seq_lens, int64_t heads);

// (x + residual, rms_norm(x + residual) * weight): the residual stream after a block's output is
// added, and the next block's input.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps) {
  TORCH_CHECK(residual.defined(), "add_rms_norm: a residual to add");
  return norm_rows(x, residual, weight, eps);
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

// How many pieces "w_xt_split" cuts a weight into: one per thread, or fewer so they are equal
// (matmul_plan.pieces).
int64_t pieces(int64_t out_features) {
  for (int64_t p = std::min<int64_t>(at::get_num_threads(), out_features); p > 1; --p) {
    if (out_features % p == 0) return p;
  }
  return 1;
}

// x (M, in) times weight (out, in) transposed, laid out as the plan's variant says (codes of
// matmul_plan.STEP_PRODUCTS): 0 rows_matmul, 1 linear, 2 W @ x.T, 3 the same with W in one
// piece per thread (one bmm), 4 W @ x.T with x padded with zero rows to 16. Contiguous (M, out).
at::Tensor product(const at::Tensor& x, const at::Tensor& weight, int64_t how) {
  const int64_t rows = x.size(0), out = weight.size(0);
  switch (how) {
    case 0:
      return rows_matmul(x, weight);
    case 1:
      return at::linear(x, weight);
    case 2:
      return at::mm(weight, x.t()).t().contiguous();
    case 3: {
      const int64_t count = pieces(out);
      const at::Tensor parts = at::bmm(weight.view({count, out / count, weight.size(1)}),
                                       x.t().expand({count, x.size(1), rows}));
      return parts.reshape({out, rows}).t().contiguous();
    }
    case 4: {
      if (rows >= 16) return at::mm(weight, x.t()).t().contiguous();
      at::Tensor padded = at::zeros({16, x.size(1)}, x.options());
      padded.narrow(0, 0, rows).copy_(x);
      return at::mm(weight, padded.t()).t().narrow(0, 0, rows).contiguous();
    }
    default:
      TORCH_CHECK(false, "decode_model: unknown product layout ", how);
  }
  return rows_matmul(x, weight);
}

// A decoder layer of a decode-only step (engine/model/model.py DecoderLayer, with every product
// done by rows_matmul): the input norm (after adding `pending`, the previous layer's MLP output,
// where there is one), the fused q/k/v projection, decode_step (rotary, cache writes, attention),
// the output projection, the residual add and post-attention norm, and the SwiGLU MLP. Returns the
// residual stream and this layer's MLP output, not yet added (the next layer's norm adds it).
// `weights` are the layer's six: input norm, q/k/v, output, post-attention norm, gate/up, down.
std::tuple<at::Tensor, at::Tensor> decode_layer(
    const at::Tensor& x, const at::Tensor& pending, at::TensorList weights, double eps,
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slots, at::Tensor k_cache,
    at::Tensor v_cache, const at::Tensor& block_tables, const at::Tensor& seq_lens,
    int64_t heads, int64_t how) {
  auto [stream, h] = norm_rows(x, pending, weights[0], eps);
  const at::Tensor attended = decode_step(product(h, weights[1], how), cos, sin, slots, k_cache,
                                          v_cache, block_tables, seq_lens, heads);
  auto [after_attn, h2] = norm_rows(stream, product(attended, weights[2], how), weights[3], eps);
  return {after_attn, product(silu_mul(product(h2, weights[4], how)), weights[5], how)};
}

// A decode-only step of the whole model in one call (engine/model/model.py LlamaModel, every
// product done by rows_matmul), from each row's token id and position to its logits: the
// embedding rows, each position's rotary angles (rows of the cos and sin tables, context x 1 x
// head_dim), the layers (decode_layer, each writing its K and V into its layer of the caches:
// layers x blocks x block_size x kv_heads x head_dim), the final norm and the output projection.
// `weights`: each layer's six (decode_layer), then the final norm's and the output projection's.
at::Tensor decode_model(const at::Tensor& ids, const at::Tensor& positions,
                        const at::Tensor& embed, const at::Tensor& cos_table,
                        const at::Tensor& sin_table, at::TensorList weights, double eps,
                        const at::Tensor& slots, at::Tensor k_cache, at::Tensor v_cache,
                        const at::Tensor& block_tables, const at::Tensor& seq_lens,
                        int64_t heads, int64_t how) {
  TORCH_CHECK(k_cache.dim() == 5 && v_cache.sizes() == k_cache.sizes(),
              "decode_model: caches of layers x blocks x block_size x kv_heads x head_dim");
  const int64_t layers = k_cache.size(0), head_dim = k_cache.size(4);
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == 6 * layers + 2,
              "decode_model: six weights per layer, then the final norm's and the output's");
  TORCH_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(),
              "decode_model: one token id and one position per row");
  const at::Tensor cos = at::index_select(cos_table.reshape({-1, head_dim}), 0, positions);
  const at::Tensor sin = at::index_select(sin_table.reshape({-1, head_dim}), 0, positions);
  at::Tensor x = at::index_select(embed, 0, ids), pending;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::tie(x, pending) = decode_layer(x, pending, weights.slice(6 * layer, 6), eps, cos, sin,
                                        slots, k_cache.select(0, layer), v_cache.select(0, layer),
                                        block_tables, seq_lens, heads, how);
  }
  const at::Tensor h = std::get<1>(norm_rows(x, pending, weights[6 * layers], eps));
  return product(h, weights[6 * layers + 1], how);
}

}  // namespace engine_kernels

TORCH_LIBRARY_FRAGMENT(engine_cpu, m) {
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("decode_model(Tensor ids, Tensor positions, Tensor embed, Tensor cos, Tensor sin, "
        "Tensor[] weights, float eps, Tensor slots, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor block_tables, Tensor seq_lens, int heads, int how) -> Tensor");
  m.impl("add_rms_norm", c10::DispatchKey::CPU, &engine_kernels::add_rms_norm);
  m.impl("silu_mul", c10::DispatchKey::CPU, &engine_kernels::silu_mul);
  m.impl("decode_model", c10::DispatchKey::CPU, &engine_kernels::decode_model);
}
