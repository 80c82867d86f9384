/* The decode step's attention kernels over a bfloat16 cache (attn_avx2.c), used by decode.c. */
#ifndef LEXI_ATTN_H
#define LEXI_ATTN_H

#include <stdint.h>

#define ATTN_HEAD_DIM_MAX 512 /* the scores kernel widens eight keys onto its stack */

/* sc[g * ld + i] = scale * (q_g . k_i) for i < n: q (g_n x hd float32), key i at k + i * stride (bfloat16);
   hd <= ATTN_HEAD_DIM_MAX. */
void attn_scores_avx2(const float *q, int64_t g_n, int64_t hd, const uint16_t *k, int64_t stride, int64_t n,
                      float scale, float *sc, int64_t ld);

/* out[g * hd + d] += sum_{i < n} w[g * ld + i] * v_i[d]: value i at v + i * stride (bfloat16). */
void attn_values_avx2(const float *w, int64_t ld, int64_t g_n, int64_t hd, const uint16_t *v, int64_t stride,
                      int64_t n, float *out);

/* w (len scores) -> softmax weights in place, gpt-oss's sink (NULL: none) joining the sum. */
void attn_softmax_avx2(float *w, int64_t len, const float *sink);

#endif
