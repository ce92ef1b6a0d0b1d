// Paged decode attention for CPUs: each sequence's one query token against its own context,
// reading every K and V row once, in place, from the sequence's blocks.
//
// Why a kernel: in plain torch, attention over a paged cache first gathers each sequence's
// blocks into a padded contiguous tensor (a copy of the whole context, padded to the batch's
// longest) and then runs scaled_dot_product_attention over it. Here the cost is what the
// sequences really hold: sum of their lengths, with no copy and no padding.
//
// Work items are (sequence, KV head) pairs: the G query heads that share a KV head (grouped-query
// attention) are served together, so each K and V row is read from memory once per item. Items
// are cut into one contiguous range per thread of about equal total context, so one long
// sequence beside many short ones keeps both cores busy. Softmax is exact (two passes over a
// scores buffer of the item's length), in fp32; the layout matches engine/model/kv_cache.py:
// caches (blocks, block_size, kv_heads, head_dim), block tables (batch, max_blocks) int64,
// sequence lengths (batch,) int32 or int64; head_dim 32, 64 or 128.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

struct Geometry {
  int64_t heads, kv_heads, group, block_size, table_width;
};

// Attention of one KV head's G query heads q (G, D) over len tokens of a sequence whose blocks
// are listed in table; writes out (G, D). D is a compile-time constant so the compiler unrolls
// and vectorizes the per-token dot products and updates completely.
template <int D>
void attend(const float* q, const float* k_cache, const float* v_cache, const int64_t* table,
            int64_t len, const Geometry& g, int64_t kv_head, float scale, float* out,
            std::vector<float>& scores) {
  const int64_t G = g.group, bs = g.block_size, row = g.kv_heads * D;
  std::fill(out, out + G * D, 0.f);
  if (len <= 0) return;  // nothing to attend to: a zero output, as the Triton kernel writes
  scores.resize(G * len);
  const int64_t blocks = (len + bs - 1) / bs;
  for (int64_t b = 0; b < blocks; ++b) {  // scores: each K row read once for all G heads
    const float* k = k_cache + table[b] * bs * row + kv_head * D;
    const int64_t n = std::min(bs, len - b * bs);
    for (int64_t i = 0; i < n; ++i, k += row) {
      for (int64_t h = 0; h < G; ++h) {
        const float* qh = q + h * D;
        float s = 0.f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < D; ++d) s += qh[d] * k[d];
        scores[h * len + b * bs + i] = s * scale;
      }
    }
  }
  for (int64_t h = 0; h < G; ++h) {  // softmax per head, in place
    float* s = scores.data() + h * len;
    const float top = *std::max_element(s, s + len);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < len; ++t) {
      s[t] = std::exp(s[t] - top);
      sum += s[t];
    }
    const float inv = 1.f / sum;
#pragma omp simd
    for (int64_t t = 0; t < len; ++t) s[t] *= inv;
  }
  for (int64_t b = 0; b < blocks; ++b) {  // weighted sum of V, each row read once
    const float* v = v_cache + table[b] * bs * row + kv_head * D;
    const int64_t n = std::min(bs, len - b * bs);
    for (int64_t i = 0; i < n; ++i, v += row) {
      for (int64_t h = 0; h < G; ++h) {
        const float p = scores[h * len + b * bs + i];
        float* o = out + h * D;
#pragma omp simd
        for (int d = 0; d < D; ++d) o[d] += p * v[d];
      }
    }
  }
}

using AttendFn = void (*)(const float*, const float*, const float*, const int64_t*, int64_t,
                          const Geometry&, int64_t, float, float*, std::vector<float>&);

AttendFn attend_for(int64_t head_dim) {
  switch (head_dim) {
    case 32: return attend<32>;
    case 64: return attend<64>;
    case 128: return attend<128>;
    default: TORCH_CHECK(false, "paged_decode: head_dim must be 32, 64 or 128, got ", head_dim);
  }
  return nullptr;
}

std::vector<int64_t> lengths_of(const at::Tensor& seq_lens) {
  const at::Tensor lens = seq_lens.contiguous();
  if (lens.scalar_type() == at::kInt) {  // the runner's int32, read without a conversion op
    const int32_t* p = lens.data_ptr<int32_t>();
    return std::vector<int64_t>(p, p + lens.numel());
  }
  TORCH_CHECK(lens.scalar_type() == at::kLong, "sequence lengths must be int32 or int64");
  const int64_t* p = lens.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + lens.numel());
}

// Attention of every sequence's query heads (q: batch x heads x head_dim, contiguous) over its
// context; writes out (same shape).
void attend_batch(const at::Tensor& qc, const at::Tensor& k_cache, const at::Tensor& v_cache,
                  const at::Tensor& block_tables, const at::Tensor& seq_lens, at::Tensor& out) {
  TORCH_CHECK(k_cache.dtype() == at::kFloat && v_cache.dtype() == at::kFloat,
              "paged_decode: float32 only");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(block_tables.dtype() == at::kLong, "block tables must be int64");
  const at::Tensor tables = block_tables.contiguous();
  const int64_t batch = qc.size(0);
  const int64_t head_dim = qc.size(2);
  const AttendFn attend_item = attend_for(head_dim);
  Geometry g{qc.size(1), k_cache.size(2), qc.size(1) / k_cache.size(2), k_cache.size(1),
             tables.size(1)};
  TORCH_CHECK(g.heads % g.kv_heads == 0, "query heads must group over KV heads");
  const std::vector<int64_t> lens = lengths_of(seq_lens);
  TORCH_CHECK(static_cast<int64_t>(lens.size()) == batch, "one sequence length per query row");

  const int64_t items = batch * g.kv_heads;
  std::vector<int64_t> start(items + 1, 0);  // prefix sums of each item's cost
  for (int64_t i = 0; i < items; ++i) start[i + 1] = start[i] + lens[i / g.kv_heads] + 16;
  // Below about 512 context positions in all, the work takes a few microseconds, about what
  // waking the other threads costs: one thread does it.
  const int64_t parts = start[items] < 512 ? 1 : std::max<int64_t>(
      1, std::min<int64_t>(at::get_num_threads(), items));
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  const float* qp = qc.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();

  at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores;
    for (int64_t part = first; part < last; ++part) {
      // This part takes the items whose cost starts inside its share of the total.
      const int64_t lo = start[items] * part / parts, hi = start[items] * (part + 1) / parts;
      const int64_t begin = std::lower_bound(start.begin(), start.end() - 1, lo) - start.begin();
      const int64_t end = std::lower_bound(start.begin(), start.end() - 1, hi) - start.begin();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / g.kv_heads, kv_head = i % g.kv_heads;
        const int64_t offset = (b * g.heads + kv_head * g.group) * head_dim;
        attend_item(qp + offset, kp, vp, tp + b * g.table_width, lens[b], g, kv_head, scale,
                    op + offset, scores);
      }
    }
  });
}

at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& seq_lens) {
  TORCH_CHECK(q.dtype() == at::kFloat, "paged_decode: float32 only");
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty_like(qc);
  attend_batch(qc, k_cache, v_cache, block_tables, seq_lens, out);
  return out;
}

// Rotate-half rotary position embedding of one head x (D) into dst: x * cos + roll(x, D/2) * sin,
// with sin stored as [-sin, sin] (engine/model/layers.py Rotary). dst may be where x will be kept.
inline void rotate(const float* x, const float* cos, const float* sin, int64_t D, float* dst) {
  const int64_t half = D / 2;
  for (int64_t d = 0; d < half; ++d) dst[d] = x[d] * cos[d] + x[d + half] * sin[d];
  for (int64_t d = half; d < D; ++d) dst[d] = x[d] * cos[d] + x[d - half] * sin[d];
}

}  // namespace

namespace engine_kernels {  // called from the library's other sources too (fused_ops.cpp)

// A whole decode step's attention for one layer, in one call: every row of qkv (T x (heads +
// 2 kv_heads) x head_dim, as the fused projection gives it) is one decoding sequence's new token.
// Rotates its q and k heads by its position's angles (cos, sin: T x head_dim), writes its k and v
// into the caches at its slot, then attends each query over its sequence's context (its blocks,
// up to its length, the new token included). Returns T x (heads x head_dim). In plain torch this
// is a dozen op calls per layer (split, rotary, cache writes, attention, reshapes), each costing
// about as much as the arithmetic at batch 1.
at::Tensor decode_step(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& slots, at::Tensor k_cache, at::Tensor v_cache,
                       const at::Tensor& block_tables, const at::Tensor& seq_lens,
                       int64_t heads) {
  TORCH_CHECK(qkv.dtype() == at::kFloat && cos.dtype() == at::kFloat && sin.dtype() == at::kFloat,
              "decode_step: float32 only");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(slots.dtype() == at::kLong, "slots must be int64");
  const int64_t rows = qkv.size(0);
  const int64_t kv_heads = k_cache.size(2), D = k_cache.size(3);
  TORCH_CHECK(qkv.size(1) == (heads + 2 * kv_heads) * D, "qkv width must be (heads + 2 kv_heads) "
              "x head_dim");
  TORCH_CHECK(cos.numel() == rows * D && sin.numel() == rows * D, "one angle row per token");
  const int64_t slot_count = k_cache.size(0) * k_cache.size(1);
  const at::Tensor x = qkv.contiguous(), c = cos.contiguous(), s = sin.contiguous();
  const at::Tensor slot_ids = slots.contiguous();
  at::Tensor q = at::empty({rows, heads, D}, qkv.options());
  const float* xp = x.data_ptr<float>();
  const float* cp = c.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  const int64_t* slot = slot_ids.data_ptr<int64_t>();
  float* qp = q.data_ptr<float>();
  float* kp = k_cache.data_ptr<float>();
  float* vp = v_cache.data_ptr<float>();
  const int64_t width = (heads + 2 * kv_heads) * D, kv_row = kv_heads * D;
  for (int64_t t = 0; t < rows; ++t) {
    TORCH_CHECK(slot[t] >= 0 && slot[t] < slot_count, "slot out of the cache");
    const float* row = xp + t * width;
    const float* ct = cp + t * D;
    const float* st = sp + t * D;
    for (int64_t h = 0; h < heads; ++h) rotate(row + h * D, ct, st, D, qp + (t * heads + h) * D);
    for (int64_t h = 0; h < kv_heads; ++h)
      rotate(row + (heads + h) * D, ct, st, D, kp + slot[t] * kv_row + h * D);
    std::copy(row + (heads + kv_heads) * D, row + width, vp + slot[t] * kv_row);
  }
  at::Tensor out = at::empty_like(q);
  attend_batch(q, k_cache, v_cache, block_tables, seq_lens, out);
  return out.view({rows, heads * D});
}

}  // namespace engine_kernels

TORCH_LIBRARY(engine_cpu, m) {
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor seq_lens) -> Tensor");
  m.def("decode_step(Tensor qkv, Tensor cos, Tensor sin, Tensor slots, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, Tensor block_tables, Tensor seq_lens, int heads) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, &paged_decode);
  m.impl("decode_step", c10::DispatchKey::CPU, &engine_kernels::decode_step);
}
