/* AVX2 attention kernels of the decode step (decode.c) over a bfloat16 KV cache: a run of keys (or values) that lie
   `stride` elements apart (one cache block's rows of one KV head), against the G query heads that share them.

   Why by hand: written as plain C loops, a score was one dependent chain of adds and a call per (key, head), ~2
   GFLOP/s, half torch's einsum at long contexts (Llama-3-1B at 2,000 keys: +143 ms a token against +77). Here the
   G heads' products with a key are independent FMA chains over its head_dim, reduced once per key, and values are
   summed into register tiles of the output (16 floats of every head) swept over the run's keys.
   head_dim is a multiple of 8 and G at most 8 (decode.c falls back to its portable loops otherwise).
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "attn.h"

static inline __m256 widen8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* G (the heads sharing a key) a constant in each instance, so the accumulators stay in registers */
static inline __attribute__((always_inline)) void scores_g(const float *q, const int64_t G, int64_t hd,
                                                             const uint16_t *k, int64_t stride, int64_t n, float scale,
                                                             float *sc, int64_t ld) {
    for (int64_t i = 0; i < n; i++, k += stride) {
        __m256 acc[8];
        for (int64_t g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
        for (int64_t d = 0; d < hd; d += 8) {
            const __m256 kv = widen8(k + d);
            for (int64_t g = 0; g < G; g++) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + d), kv, acc[g]);
        }
        for (int64_t g = 0; g < G; g++) sc[g * ld + i] = hsum(acc[g]) * scale;
    }
}

/* out[g * hd + d] += sum_i w[g * ld + i] * v_i[d], a tile of W 8-float columns of every head at a time (W G <= 8) */
static inline __attribute__((always_inline)) void values_g(const float *w, int64_t ld, const int64_t G, const int64_t W,
                                                             int64_t hd, const uint16_t *v, int64_t stride, int64_t n,
                                                             float *out) {
    int64_t d0 = 0;
    for (; d0 + 8 * W <= hd; d0 += 8 * W) {
        __m256 acc[8];
        for (int64_t g = 0; g < G; g++)
            for (int64_t c = 0; c < W; c++) acc[g * W + c] = _mm256_loadu_ps(out + g * hd + d0 + 8 * c);
        const uint16_t *row = v + d0;
        for (int64_t i = 0; i < n; i++, row += stride) {
            __m256 vv[4];
            for (int64_t c = 0; c < W; c++) vv[c] = widen8(row + 8 * c);
            for (int64_t g = 0; g < G; g++) {
                const __m256 wi = _mm256_broadcast_ss(w + g * ld + i);
                for (int64_t c = 0; c < W; c++) acc[g * W + c] = _mm256_fmadd_ps(wi, vv[c], acc[g * W + c]);
            }
        }
        for (int64_t g = 0; g < G; g++)
            for (int64_t c = 0; c < W; c++) _mm256_storeu_ps(out + g * hd + d0 + 8 * c, acc[g * W + c]);
    }
    for (; d0 < hd; d0 += 8) { /* what is left of head_dim past the last whole tile: one column at a time */
        for (int64_t g = 0; g < G; g++) {
            __m256 acc = _mm256_loadu_ps(out + g * hd + d0);
            const uint16_t *row = v + d0;
            for (int64_t i = 0; i < n; i++, row += stride)
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + g * ld + i), widen8(row), acc);
            _mm256_storeu_ps(out + g * hd + d0, acc);
        }
    }
}

#define BY_G(CALL) \
    switch (g_n) { \
    case 1: CALL(1, 4); break; \
    case 2: CALL(2, 4); break; \
    case 3: CALL(3, 2); break; \
    case 4: CALL(4, 2); break; \
    case 5: CALL(5, 1); break; \
    case 6: CALL(6, 1); break; \
    case 7: CALL(7, 1); break; \
    default: CALL(8, 1); break; \
    }

void attn_scores_avx2(const float *q, int64_t g_n, int64_t hd, const uint16_t *k, int64_t stride, int64_t n,
                      float scale, float *sc, int64_t ld) {
#define SCORES(G, W) scores_g(q, G, hd, k, stride, n, scale, sc, ld)
    BY_G(SCORES)
#undef SCORES
}

void attn_values_avx2(const float *w, int64_t ld, int64_t g_n, int64_t hd, const uint16_t *v, int64_t stride,
                      int64_t n, float *out) {
#define VALUES(G, W) values_g(w, ld, G, W, hd, v, stride, n, out)
    BY_G(VALUES)
#undef VALUES
}
#endif
