/* AVX2 attention kernels of the decode step (decode_attn.c) over a bfloat16 KV cache: a run of keys (or values)
   that lie `stride` elements apart (one cache block's rows of one KV head), against the query vectors of a piece
   (heads sharing the KV head, from one or more rows of a sequence: scores take any count, values up to 8 at a
   time), and the softmax between them.

   Why by hand: written as plain C loops, a score was one dependent chain of adds and a call per (key, head), ~2
   GFLOP/s, half torch's einsum at long contexts (Llama-3-1B at 2,000 keys: +143 ms a token against +77). Scores
   take eight keys at a time, widened once for every vector and summed across lanes together (a sum per key and
   vector cost as much as its products); values are summed into register tiles of the output (16 floats of every
   vector) swept over the run's keys; the softmax's exponentials are a polynomial eight at a time (libm's expf,
   one call an element, was a fifth of a 9-row step's attention at 2,000 keys). head_dim is a multiple of 8.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "vexp_avx2.h"

static inline __m256 widen8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Lane j of the result: the sum of a[j]'s eight lanes (pairs, then quads, then the two halves). */
static inline __m256 sum_lanes8(const __m256 a[8]) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Scores eight keys at a time: the keys widened to float32 once into `kb` (8 x hd), then each query's eight dot
   products as eight FMA chains over head_dim, summed across lanes together. Keys past n are zeros (never read). */
void attn_scores_avx2(const float *q, int64_t g_n, int64_t hd, const uint16_t *k, int64_t stride, int64_t n,
                      float scale, float *sc, int64_t ld) {
    float kb[8 * ATTN_HEAD_DIM_MAX];
    const __m256 scale_v = _mm256_set1_ps(scale);
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
        const int64_t nk = n - i0 < 8 ? n - i0 : 8;
        for (int64_t key = 0; key < 8; key++)
            for (int64_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(kb + key * hd + d, key < nk ? widen8(k + (i0 + key) * stride + d) : _mm256_setzero_ps());
        for (int64_t g = 0; g < g_n; g++) {
            __m256 acc[8];
            for (int key = 0; key < 8; key++) acc[key] = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 8) {
                const __m256 qd = _mm256_loadu_ps(q + g * hd + d);
                for (int key = 0; key < 8; key++)
                    acc[key] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kb + key * hd + d), acc[key]);
            }
            const __m256 s = _mm256_mul_ps(sum_lanes8(acc), scale_v);
            if (nk == 8) {
                _mm256_storeu_ps(sc + g * ld + i0, s);
            } else {
                float tail[8];
                _mm256_storeu_ps(tail, s);
                memcpy(sc + g * ld + i0, tail, sizeof(float) * (size_t)nk);
            }
        }
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

void attn_softmax_avx2(float *w, int64_t len, const float *sink) {
    int64_t i = 0;
    __m256 top8 = _mm256_set1_ps(w[0]);
    for (; i + 8 <= len; i += 8) top8 = _mm256_max_ps(top8, _mm256_loadu_ps(w + i));
    __m128 t4 = _mm_max_ps(_mm256_castps256_ps128(top8), _mm256_extractf128_ps(top8, 1));
    t4 = _mm_max_ps(t4, _mm_movehl_ps(t4, t4));
    float top = _mm_cvtss_f32(_mm_max_ss(t4, _mm_movehdup_ps(t4)));
    for (; i < len; i++) top = w[i] > top ? w[i] : top;
    if (sink && *sink > top) top = *sink;
    const __m256 top_v = _mm256_set1_ps(top);
    __m256 sum8 = _mm256_setzero_ps();
    for (i = 0; i + 8 <= len; i += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(w + i), top_v));
        _mm256_storeu_ps(w + i, e);
        sum8 = _mm256_add_ps(sum8, e);
    }
    if (i < len) { /* the tail through the same polynomial, padded with -inf's zeros */
        float tail[8];
        for (int l = 0; l < 8; l++) tail[l] = i + l < len ? w[i + l] - top : -INFINITY;
        const __m256 e = exp_nonpositive(_mm256_loadu_ps(tail));
        _mm256_storeu_ps(tail, e);
        for (int l = 0; i + l < len; l++) w[i + l] = tail[l];
        sum8 = _mm256_add_ps(sum8, e);
    }
    float sum = hsum(sum8);
    if (sink) sum += expf(*sink - top);
    const __m256 sum_v = _mm256_set1_ps(sum);
    for (i = 0; i + 8 <= len; i += 8) _mm256_storeu_ps(w + i, _mm256_div_ps(_mm256_loadu_ps(w + i), sum_v));
    for (; i < len; i++) w[i] /= sum;
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

void attn_values_avx2(const float *w, int64_t ld, int64_t g_n, int64_t hd, const uint16_t *v, int64_t stride,
                      int64_t n, float *out) {
#define VALUES(G, W) values_g(w, ld, G, W, hd, v, stride, n, out)
    BY_G(VALUES)
#undef VALUES
}
#endif
