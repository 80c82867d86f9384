/* e^x eight floats at a time for the AVX2 files (attn_avx2.c's softmax, act_avx2.c's activations). */
#ifndef LEXI_VEXP_AVX2_H
#define LEXI_VEXP_AVX2_H

#include <immintrin.h>

/* e^x for x <= 0 (a score less its row's top, -|x| in an activation): Cody-Waite reduction to r in
   [-ln2/2, ln2/2], Cephes' expf polynomial (~1 ulp), times 2^n through the exponent bits; below -87.3 (2^n past
   float's normal range) 0. The including file enables AVX2 and FMA (its target pragma) first. */
static inline __attribute__((always_inline)) __m256 exp_nonpositive(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return _mm256_and_ps(e, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

#endif
