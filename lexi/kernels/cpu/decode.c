/* A decode step's transformer layers in one call: norms, matmuls, rope, the KV cache write, attention over the
   paged cache, the FFN (dense or mixture of experts) and the residual adds, for every layer.

   Why in C: a decode step of a small model was bound by the calls around its matmuls, not by the matmuls. SmolLM2
   made ~200 torch ops a layer a step (~5,900 a token, 17.6 ms, against ~5 ms in the kernels); a layer here is four
   or five matmul jobs and one attention job on the pool, and the rest is loops over a few thousand floats.

   The math is lexi/model/decode_cpu.py's `run_decode`, the reference it is tested against, step for step:
     - rms_norm in float32: x * (1 / sqrt(mean(x^2) + eps)) * w, two roundings as torch's;
     - rope as rope.py's apply_rope: x * cos_full + partner(x) * sin_signed, each product rounded, then the sum;
     - q, k and v rounded to the cache's dtype (bfloat16: round to nearest even), as `.to(k_cache.dtype)`;
     - attention (decode_attn.c): float32 scores of each query head over its row's keys (every position up to
       its own, within the window), times the scale, softmax (with gpt-oss's sink as one more column), the
       weighted sum of values, the result rounded to the cache's dtype as decode_attention's `.to(q.dtype)`;
     - FFN: act(gate) * up then down (act_avx2.c where the CPU has AVX2), or the router's top-k (softmax over all
       then top-k renormalised, or top-k logits then their softmax) and moe.c's experts.
   Sums are ordered differently from torch's (attention, the norms' mean) and the AVX2 exponentials are
   polynomials, so a logit can differ from the reference's in its last bits; tests hold the two within a small
   fraction of the logit span.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "act.h"
#include "attn.h"
#include "decode.h"
#include "decode_attn.h"
#include "decode_math.h"
#include "moe.h"

HOT static float sum_squares(const float *x, int64_t n) {
    return dot_f32(x, x, n);
}

static void rms_norm_row(const float *x, const float *w, float *out, int64_t n, float eps) {
    const float inv = 1.0f / sqrtf(sum_squares(x, n) / (float)n + eps);
    for (int64_t j = 0; j < n; j++) out[j] = x[j] * inv * w[j];
}

static void rope_head(float *x, const float *cos_full, const float *sin_signed, int64_t rope_dim, int neox) {
    float tmp[512]; /* rope_dim <= 512 (checked) */
    const int64_t half = rope_dim / 2;
    memcpy(tmp, x, sizeof(float) * (size_t)rope_dim);
    for (int64_t j = 0; j < rope_dim; j++) {
        const int64_t p = neox ? (j < half ? j + half : j - half) : (j ^ 1);
        x[j] = tmp[j] * cos_full[j] + tmp[p] * sin_signed[j];
    }
}

static float activate(int act, float g, float u) {
    if (act == DEC_ACT_GELU_TANH) {
        const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
        return 0.5f * g * (1.0f + tanhf(inner)) * u;
    }
    return g / (1.0f + expf(-g)) * u;
}

static weight_desc as_desc(const dec_weight *w) {
    return (weight_desc){(int)w->type, (const uint8_t *)(uintptr_t)w->address, w->row_bytes, w->n, w->col,
                         (int)w->layout};
}

static const dec_layer *layer_of(const dec_model *m, int64_t i) {
    return (const dec_layer *)(uintptr_t)m->layers + i;
}

const char *decode_check_model(const isa_kernels *isa, const dec_model *m) {
    if (m->n_layers < 1 || m->dim < 1 || m->n_heads < 1 || m->n_kv_heads < 1 || m->head_dim < 1)
        return "need n_layers, dim, n_heads, n_kv_heads and head_dim >= 1";
    if (m->n_heads % m->n_kv_heads) return "n_heads must be a multiple of n_kv_heads";
    if (m->rope_dim < 0 || m->rope_dim > m->head_dim || m->rope_dim % 2 || m->rope_dim > 512)
        return "rope_dim must be even, at most head_dim and 512";
    if (m->terms != 1 && m->terms != 2) return "terms must be 1 or 2";
    if (m->cache_type != DEC_CACHE_F32 && m->cache_type != DEC_CACHE_BF16) return "the cache must be float32 or bfloat16";
    if (m->activation != DEC_ACT_SILU && m->activation != DEC_ACT_GELU_TANH) return "activation must be silu or gelu_tanh";
    const int64_t hd = m->head_dim, nq = (m->n_heads + 2 * m->n_kv_heads) * hd;
    for (int64_t i = 0; i < m->n_layers; i++) {
        const dec_layer *l = layer_of(m, i);
        if (!l->attn_norm || !l->ffn_norm) return "every layer needs its attention and FFN norms";
        weight_desc w[3];
        int64_t cols = 0;
        for (int j = 0; j < 3; j++) {
            w[j] = as_desc(l->qkv + j);
            if (w[j].col != cols) return "q, k and v must fill the qkv columns in order";
            cols += w[j].n;
        }
        if (cols != nq) return "q, k and v must have (n_heads + 2 n_kv_heads) head_dim rows";
        const char *problem = qgemm_check(isa, w, 3, m->dim);
        if (problem) return problem;
        w[0] = as_desc(&l->wo);
        if (w[0].n != m->dim || w[0].col) return "wo must have dim rows";
        if ((problem = qgemm_check(isa, w, 1, m->n_heads * hd))) return problem;
        if (l->window < 0) return "a window must be >= 0";
        if (!l->moe_table) {
            if (m->ffn_dim < 1) return "a dense layer needs ffn_dim >= 1";
            w[0] = as_desc(l->gate_up);
            w[1] = as_desc(l->gate_up + 1);
            if (w[0].n != m->ffn_dim || w[1].n != m->ffn_dim || w[0].col || w[1].col != m->ffn_dim)
                return "gate and up must have ffn_dim rows each, gate's columns first";
            if ((problem = qgemm_check(isa, w, 2, m->dim))) return problem;
            w[0] = as_desc(&l->down);
            if (w[0].n != m->dim || w[0].col) return "down must have dim rows";
            if ((problem = qgemm_check(isa, w, 1, m->ffn_dim))) return problem;
            continue;
        }
        if (!l->router || l->n_experts < 1 || l->top_k < 1 || l->top_k > l->n_experts || l->n_experts > 4096)
            return "a mixture-of-experts layer needs a router, 1 <= top_k <= n_experts <= 4096";
        if (l->routing != DEC_ROUTE_SOFTMAX_TOPK && l->routing != DEC_ROUTE_TOPK_SOFTMAX) return "unknown routing";
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)l->n_experts);
        float *route = malloc(sizeof(float) * (size_t)l->n_experts);
        if (!ids || !route) {
            free(ids);
            free(route);
            return "out of memory";
        }
        for (int32_t e = 0; e < l->n_experts; e++) ids[e] = e, route[e] = 0.0f;
        moe_args a = {.t = l->n_experts, .d = m->dim, .f = l->expert_ffn, .k = 1, .ids = ids, .route = route,
                      .table = (const int64_t *)(uintptr_t)l->moe_table, .e = (int)l->n_experts,
                      .act = (int)l->moe_act, .terms = (int)m->terms};
        problem = moe_check(isa, &a); /* every expert, one row each */
        free(ids);
        free(route);
        if (problem) return problem;
    }
    return NULL;
}

const char *decode_check_step(const dec_model *m, const dec_step *s) {
    if (s->t < 1 || s->s < 1 || s->s > s->t) return "need 1 <= sequences <= rows";
    if (s->block_size < 1 || s->bt_stride < 1 || s->num_blocks < 1) return "bad block size, table width or pool";
    if (s->query_start[0] != 0 || s->query_start[s->s] != s->t) return "query_start must run from 0 to the rows";
    const int64_t slots = s->num_blocks * s->block_size;
    for (int64_t i = 0; i < s->s; i++) {
        if (s->query_start[i + 1] <= s->query_start[i]) return "every sequence needs at least one row";
        int64_t top = -1;
        for (int64_t r = s->query_start[i]; r < s->query_start[i + 1]; r++) {
            if (s->positions[r] < 0 || s->slots[r] < 0 || s->slots[r] >= slots) return "a position or slot is out of range";
            if (s->positions[r] > top) top = s->positions[r];
        }
        if (top / s->block_size >= s->bt_stride) return "a position is past its block table";
        for (int64_t b = 0; b <= top / s->block_size; b++) {
            const int32_t id = s->block_tables[i * s->bt_stride + b];
            if (id < 0 || id >= s->num_blocks) return "a block id is out of range";
        }
    }
    (void)m;
    return NULL;
}

/* x (t x d) rows through a norm into out */
static void norm_rows(const float *x, const float *w, float *out, int64_t t, int64_t d, float eps) {
    for (int64_t r = 0; r < t; r++) rms_norm_row(x + r * d, w, out + r * d, d, eps);
}

/* The router's choice for one row: ids and weights (k), from logits (E). */
static void route_row(const dec_layer *l, float *logits, int32_t *ids, float *weights) {
    const int64_t e_n = l->n_experts, k = l->top_k;
    if (l->routing == DEC_ROUTE_SOFTMAX_TOPK) { /* softmax over all, top-k, renormalised */
        float top = logits[0], sum = 0.0f;
        for (int64_t e = 1; e < e_n; e++) top = logits[e] > top ? logits[e] : top;
        for (int64_t e = 0; e < e_n; e++) sum += (logits[e] = expf(logits[e] - top));
        for (int64_t e = 0; e < e_n; e++) logits[e] /= sum;
    }
    for (int64_t s = 0; s < k; s++) { /* the k largest, largest first; ties to the lower id */
        int64_t best = -1;
        for (int64_t e = 0; e < e_n; e++) {
            int taken = 0;
            for (int64_t p = 0; p < s && !taken; p++) taken = ids[p] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[s] = (int32_t)best;
        weights[s] = logits[best];
    }
    if (l->routing == DEC_ROUTE_SOFTMAX_TOPK) {
        float sum = 0.0f;
        for (int64_t s = 0; s < k; s++) sum += weights[s];
        for (int64_t s = 0; s < k; s++) weights[s] /= sum;
    } else { /* softmax over the k logits */
        float sum = 0.0f;
        const float top = weights[0];
        for (int64_t s = 0; s < k; s++) sum += (weights[s] = expf(weights[s] - top));
        for (int64_t s = 0; s < k; s++) weights[s] /= sum;
    }
}

static int moe_layer(pool *p, workspace *ws, const isa_kernels *isa, const dec_model *m, const dec_layer *l,
                     const float *xn, int64_t t, float *logits, int32_t *ids, float *route, float *y) {
    const int64_t d = m->dim, e_n = l->n_experts, k = l->top_k;
    const float *router = F32(l->router), *bias = F32(l->router_bias);
    for (int64_t r = 0; r < t; r++) {
        float *lg = logits + r * e_n;
        for (int64_t e = 0; e < e_n; e++) {
            lg[e] = dot_f32(xn + r * d, router + e * d, d);
            if (bias) lg[e] += bias[e];
        }
        route_row(l, lg, ids + r * k, route + r * k);
    }
    moe_args a = {.x = xn, .t = t, .d = d, .f = l->expert_ffn, .k = (int)k, .ids = ids, .route = route,
                  .table = (const int64_t *)(uintptr_t)l->moe_table, .e = (int)e_n, .gate_bias = F32(l->gate_bias),
                  .up_bias = F32(l->up_bias), .down_bias = F32(l->down_bias), .act = (int)l->moe_act,
                  .alpha = (float)l->alpha, .limit = (float)l->limit, .y = y, .terms = (int)m->terms};
    return moe_ffn(p, ws, isa, &a);
}

int decode_layers(pool *p, workspace *ws, const isa_kernels *isa, const dec_model *m, const dec_step *s) {
    const int64_t t = s->t, d = m->dim, h = m->n_heads, kvh = m->n_kv_heads, hd = m->head_dim;
    const int64_t nq = (h + 2 * kvh) * hd, f = m->ffn_dim;
    const float eps = (float)m->eps;
    int64_t top_keys = 0, e_max = 0, k_max = 0;
    for (int64_t r = 0; r < t; r++) top_keys = s->positions[r] + 1 > top_keys ? s->positions[r] + 1 : top_keys;
    for (int64_t i = 0; i < m->n_layers; i++) {
        const dec_layer *l = layer_of(m, i);
        if (l->moe_table && l->n_experts > e_max) e_max = l->n_experts;
        if (l->moe_table && l->top_k > k_max) k_max = l->top_k;
    }
    const int threads = pool_threads(p);
    const int64_t scratch_floats = attn_scratch_floats(m, top_keys), max_pieces = attn_max_pieces(m, t);
    const int64_t floats = t * d * 3 + t * nq + t * h * hd + t * 2 * (f > 0 ? f : 1) + t * (e_max + 2 * k_max) +
                           threads * scratch_floats + t + 4 * max_pieces;
    if (workspace_grow((void **)&ws->dec_f, &ws->dec_f_cap, sizeof(float) * (size_t)floats)) return -1;
    float *xn = ws->dec_f, *y = xn + t * d, *o = y + t * d, *qkv = o + t * d, *att = qkv + t * nq;
    float *gu = att + t * h * hd, *logits = gu + t * 2 * (f > 0 ? f : 1), *route = logits + t * e_max;
    int32_t *ids = (int32_t *)(route + t * k_max);
    float *scratch = (float *)(ids + t * k_max);
    int32_t *seq_of = (int32_t *)(scratch + threads * scratch_floats);
    for (int64_t i = 0; i < s->s; i++)
        for (int64_t r = s->query_start[i]; r < s->query_start[i + 1]; r++) seq_of[r] = (int32_t)i;
    attn_piece *pieces = (attn_piece *)(seq_of + t);
    attn_plan plan = {.m = m, .s = s, .pieces = pieces, .seq_of = seq_of, .scratch = scratch,
                      .scratch_floats = scratch_floats,
                      .avx2 = strcmp(isa->name, "scalar") && m->cache_type == DEC_CACHE_BF16 && hd % 8 == 0 &&
                              hd <= ATTN_HEAD_DIM_MAX};
    if (plan.avx2) plan.n_pieces = attn_pieces(m, s, threads, pieces);
    const int vector_act = strcmp(isa->name, "scalar") != 0; /* act_avx2.c */
    (void)vector_act; /* read on x86 only */

    for (int64_t li = 0; li < m->n_layers; li++) {
        const dec_layer *l = layer_of(m, li);
        const int bf16 = m->cache_type == DEC_CACHE_BF16;
        void *k_cache = (void *)(uintptr_t)s->kv[2 * li], *v_cache = (void *)(uintptr_t)s->kv[2 * li + 1];
        weight_desc w[3];

        /* q, k, v */
        norm_rows(s->x, F32(l->attn_norm), xn, t, d, eps);
        for (int j = 0; j < 3; j++) w[j] = as_desc(l->qkv + j);
        if (qgemm(p, ws, isa, xn, t, d, d, w, 3, qkv, nq, (int)m->terms)) return -1;
        const float *qkv_bias = F32(l->qkv_bias), *qk_norm = F32(l->qk_norm);
        const float *cos = l->window ? s->cos_l : s->cos_g, *sin = l->window ? s->sin_l : s->sin_g;
        for (int64_t r = 0; r < t; r++) {
            float *row = qkv + r * nq;
            if (qkv_bias)
                for (int64_t c = 0; c < nq; c++) row[c] += qkv_bias[c];
            for (int64_t head = 0; head < h + kvh; head++) {
                float *x = row + head * hd;
                if (qk_norm) rms_norm_row(x, qk_norm + head * hd, x, hd, eps);
                if (m->rope_dim) rope_head(x, cos + r * m->rope_dim, sin + r * m->rope_dim, m->rope_dim, (int)m->rope_neox);
            }
            for (int64_t c = 0; c < nq; c++) row[c] = round_to_cache(row[c], m->cache_type);
            const int64_t at = s->slots[r] * kvh * hd;
            const float *k = row + h * hd, *v = k + kvh * hd;
            for (int64_t c = 0; c < kvh * hd; c++) {
                if (bf16) {
                    ((uint16_t *)k_cache)[at + c] = f32_to_bf16(k[c]);
                    ((uint16_t *)v_cache)[at + c] = f32_to_bf16(v[c]);
                } else {
                    ((float *)k_cache)[at + c] = k[c];
                    ((float *)v_cache)[at + c] = v[c];
                }
            }
        }

        /* attention, then the output projection */
        decode_attention(p, &plan, l, qkv, nq, k_cache, v_cache, att);
        w[0] = as_desc(&l->wo);
        if (qgemm(p, ws, isa, att, t, h * hd, h * hd, w, 1, o, d, (int)m->terms)) return -1;
        const float *wo_bias = F32(l->wo_bias);
        for (int64_t r = 0; r < t; r++) {
            float *orow = o + r * d, *xrow = s->x + r * d;
            if (wo_bias)
                for (int64_t c = 0; c < d; c++) orow[c] += wo_bias[c];
            if (l->post_attn_norm) rms_norm_row(orow, F32(l->post_attn_norm), orow, d, eps);
            for (int64_t c = 0; c < d; c++) xrow[c] += orow[c];
        }

        /* the FFN */
        norm_rows(s->x, F32(l->ffn_norm), xn, t, d, eps);
        if (l->moe_table) {
            if (moe_layer(p, ws, isa, m, l, xn, t, logits, ids, route, y)) return -1;
        } else {
            w[0] = as_desc(l->gate_up);
            w[1] = as_desc(l->gate_up + 1);
            if (qgemm(p, ws, isa, xn, t, d, d, w, 2, gu, 2 * f, (int)m->terms)) return -1;
            for (int64_t r = 0; r < t; r++) {
                float *g = gu + r * 2 * f;
#if defined(__x86_64__) || defined(__i386__)
                if (vector_act) {
                    act_gated_avx2((int)m->activation, g, g + f, f);
                    continue;
                }
#endif
                for (int64_t c = 0; c < f; c++) g[c] = activate((int)m->activation, g[c], g[f + c]);
            }
            w[0] = as_desc(&l->down);
            if (qgemm(p, ws, isa, gu, t, f, 2 * f, w, 1, y, d, (int)m->terms)) return -1;
        }
        for (int64_t r = 0; r < t; r++) {
            float *yrow = y + r * d, *xrow = s->x + r * d;
            if (l->post_ffn_norm) rms_norm_row(yrow, F32(l->post_ffn_norm), yrow, d, eps);
            for (int64_t c = 0; c < d; c++) xrow[c] += yrow[c];
        }
    }
    return 0;
}
