/* The decode step's gated FFN activation eight columns at a time (decode.c): g <- act(g) * u over a row.

   Why: libm's expf (SiLU) or tanhf (GELU) a call an element, on the step's calling thread while the pool waits,
   was ~0.3 ms of every row of SmolLM2's step (1,536 columns x 30 layers). Both go through vexp_avx2.h's exponential
   of a non-positive argument: SiLU g / (1 + e^-g) as g / (1 + e) for g >= 0 and g e / (1 + e) below, e = e^-|g|;
   tanh(z) as sign(z) (1 - e) / (1 + e), e = e^-2|z|.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "act.h"
#include "vexp_avx2.h"

static inline __m256 silu8(__m256 g) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign)); /* e^-|g| */
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), g); /* g < 0 (sign bit set): g e */
    return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

static inline __m256 gelu_tanh8(__m256 g) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                       _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(0.044715f), g3)));
    const __m256 e = exp_nonpositive(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_or_ps(inner, sign)));
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)); /* tanh |inner| */
    const __m256 tanh_inner = _mm256_or_ps(t, _mm256_and_ps(inner, sign));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), _mm256_add_ps(one, tanh_inner));
}

void act_gated_avx2(int act, float *g, const float *u, int64_t f) {
    int64_t c = 0;
    for (; c + 8 <= f; c += 8) {
        const __m256 gv = _mm256_loadu_ps(g + c);
        const __m256 a = act == DEC_ACT_GELU_TANH ? gelu_tanh8(gv) : silu8(gv);
        _mm256_storeu_ps(g + c, _mm256_mul_ps(a, _mm256_loadu_ps(u + c)));
    }
    if (c < f) { /* the tail through the same lanes, padded with zeros */
        float gt[8] = {0}, ut[8] = {0};
        for (int64_t l = 0; c + l < f; l++) gt[l] = g[c + l], ut[l] = u[c + l];
        act_gated_avx2(act, gt, ut, 8);
        for (int64_t l = 0; c + l < f; l++) g[c + l] = gt[l];
    }
}
#endif
