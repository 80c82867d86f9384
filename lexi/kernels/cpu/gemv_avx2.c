/* AVX2 decode kernels: up to GEMV_MAX_M rows of x against 4 weight rows, read straight from their GGUF blocks.

   A decode step multiplies one row per sequence by every weight, so it is bound by the bytes it streams; the strip
   kernels' unpack-and-interleave (gemm_avx2.c) pays for itself only over many rows of x. These decode each block
   in registers, ggml-style, and produce for every pair the same integer sums and the same two fused multiply-adds
   per activation block as the canonical arithmetic of lexi_cpu.h: the four rows are the four lanes of the float
   accumulators, so a row's result is bit for bit what the strip kernels give it in any batch.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <string.h>

#include "lexi_cpu.h"

/* Four vectors of eight int32 -> their four sums (exact). */
static inline __m128i hsum4(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

static inline float fp16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8))); }

static inline __m128 fp16x4(const uint8_t *const *p, int off) {
    return _mm_setr_ps(fp16(p[0] + off), fp16(p[1] + off), fp16(p[2] + off), fp16(p[3] + off));
}

/* acc lanes (rows) += float(isum) * D * d, then float(osum) * Dm * d: the canonical order. */
static inline __m128 accumulate(__m128 acc, __m128i isum, __m128 D, __m128i osum, __m128 Dm, float d, int offset) {
    __m128 vd = _mm_set1_ps(d);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(D, vd), acc);
    return offset ? _mm_fmadd_ps(_mm_cvtepi32_ps(osum), _mm_mul_ps(Dm, vd), acc) : acc;
}

static inline __m256i x32(const act_q8 *a, int64_t c, int64_t j) {
    return _mm256_loadu_si256((const __m256i *)(a->q + c * a->k + j));
}

/* ---- 256-value super-blocks (activation scale per 256) ---- */

/* Q4_K: scales and mins (6 bits) unpacked as ggml's vec_dot_q4_K_q8_K does; w = d sc q - dmin m. */
static void gemv_q4_k(const uint8_t *const *rows, int64_t k, const act_q8 *a, float *out, int ld) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const int64_t m = a->m, nsb = k / 256;
    __m128 acc[GEMV_MAX_M];
    for (int64_t c = 0; c < m; c++) acc[c] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m256i is[4][GEMV_MAX_M], os[4][GEMV_MAX_M];
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = rows[r] + sb * 144;
            uint32_t u[4];
            memcpy(u, p + 4, 12);
            u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
            const uint32_t aux = u[1] & kmask1;
            u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
            u[2] = aux;
            u[0] &= kmask1;
            __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
            __m128i sc8 = _mm256_castsi256_si128(ms), mn8 = _mm256_extracti128_si256(ms, 1);
            __m256i scales = _mm256_broadcastsi128_si256(sc8);
            /* each min for both 16-value groups of its sub-block */
            __m256i o16 = _mm256_set_m128i(_mm_unpackhi_epi16(mn8, mn8), _mm_unpacklo_epi16(mn8, mn8));
            for (int64_t c = 0; c < m; c++) {
                is[r][c] = _mm256_setzero_si256();
                __m256i g = _mm256_loadu_si256((const __m256i *)(a->g + c * (k / 16) + sb * 16));
                os[r][c] = _mm256_madd_epi16(o16, g);
            }
            for (int j = 0; j < 4; j++) {
                __m256i q4 = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * j));
                __m256i lo = _mm256_and_si256(q4, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                __m256i sl = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j))));
                __m256i sh = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1))));
                for (int64_t c = 0; c < m; c++) {
                    int64_t j0 = sb * 256 + 64 * j;
                    __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x32(a, c, j0)), sl);
                    __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x32(a, c, j0 + 32)), sh);
                    is[r][c] = _mm256_add_epi32(is[r][c], _mm256_add_epi32(pl, ph));
                }
            }
        }
        const uint8_t *blk[4] = {rows[0] + sb * 144, rows[1] + sb * 144, rows[2] + sb * 144, rows[3] + sb * 144};
        __m128 D = fp16x4(blk, 0), Dm = _mm_sub_ps(_mm_setzero_ps(), fp16x4(blk, 2));
        for (int64_t c = 0; c < m; c++) {
            __m128i isum = hsum4(is[0][c], is[1][c], is[2][c], is[3][c]);
            __m128i osum = hsum4(os[0][c], os[1][c], os[2][c], os[3][c]);
            acc[c] = accumulate(acc[c], isum, D, osum, Dm, a->d[c * (k / 256) + sb], 1);
        }
    }
    for (int64_t c = 0; c < m; c++) _mm_storeu_ps(out + c * ld, acc[c]);
}

/* Q6_K: q = 6 bits (ql nibble | 2 bits of qh), w = d sc (q - 32) = d sc q + (-d)(32 sc); ggml's layout. */
static void gemv_q6_k(const uint8_t *const *rows, int64_t k, const act_q8 *a, float *out, int ld) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const int64_t m = a->m, nsb = k / 256;
    __m128 acc[GEMV_MAX_M];
    for (int64_t c = 0; c < m; c++) acc[c] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m256i is[4][GEMV_MAX_M], os[4][GEMV_MAX_M];
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = rows[r] + sb * 210;
            const uint8_t *ql = p, *qh = p + 128;
            __m128i sc8 = _mm_loadu_si128((const __m128i *)(p + 192)); /* 16 int8 scales, one per group */
            __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            __m256i o16 = _mm256_slli_epi16(sc16, 5); /* 32 sc */
            for (int64_t c = 0; c < m; c++) {
                is[r][c] = _mm256_setzero_si256();
                __m256i g = _mm256_loadu_si256((const __m256i *)(a->g + c * (k / 16) + sb * 16));
                os[r][c] = _mm256_madd_epi16(o16, g);
            }
            for (int h = 0; h < 2; h++) {
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
                __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
                __m256i v[4];
                v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
                v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
                v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
                v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
                for (int i = 0; i < 4; i++) {
                    /* values 128h + 32i .. +31: groups 8h + 2i (first 16) and 8h + 2i + 1 */
                    int g0 = 8 * h + 2 * i;
                    __m256i s = _mm256_set_m128i(_mm_set1_epi16(((const int8_t *)p)[192 + g0 + 1]),
                                                 _mm_set1_epi16(((const int8_t *)p)[192 + g0]));
                    for (int64_t c = 0; c < m; c++) {
                        __m256i x = x32(a, c, sb * 256 + 128 * h + 32 * i);
                        is[r][c] = _mm256_add_epi32(is[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(v[i], x), s));
                    }
                }
            }
        }
        const uint8_t *blk[4] = {rows[0] + sb * 210, rows[1] + sb * 210, rows[2] + sb * 210, rows[3] + sb * 210};
        __m128 D = fp16x4(blk, 208), Dm = _mm_sub_ps(_mm_setzero_ps(), D);
        for (int64_t c = 0; c < m; c++) {
            __m128i isum = hsum4(is[0][c], is[1][c], is[2][c], is[3][c]);
            __m128i osum = hsum4(os[0][c], os[1][c], os[2][c], os[3][c]);
            acc[c] = accumulate(acc[c], isum, D, osum, Dm, a->d[c * (k / 256) + sb], 1);
        }
    }
    for (int64_t c = 0; c < m; c++) _mm_storeu_ps(out + c * ld, acc[c]);
}

/* ---- 32-value blocks (activation scale per 32) ---- */

/* One 32-value block of every row: `values(r)` gives row r's 32 values (unsigned unless SIGNED); the offset is
   o x the block's activation sum, o the type's constant, Dm a per-row float vector. */
#define DEFINE_GEMV32(NAME, BYTES, SIGNED, VALUES, DVEC, DMVEC, OFFSET)                                        \
    static void NAME(const uint8_t *const *rows, int64_t k, const act_q8 *a, float *out, int ld) {          \
        const int64_t m = a->m, nb = k / 32;                                                                \
        const __m256i ones = _mm256_set1_epi16(1);                                                          \
        __m128 acc[GEMV_MAX_M];                                                                             \
        for (int64_t c = 0; c < m; c++) acc[c] = _mm_setzero_ps();                                          \
        for (int64_t b = 0; b < nb; b++) {                                                                  \
            const uint8_t *blk[4] = {rows[0] + b * BYTES, rows[1] + b * BYTES, rows[2] + b * BYTES,         \
                                     rows[3] + b * BYTES};                                                  \
            __m256i v[4], va[4];                                                                            \
            for (int r = 0; r < 4; r++) {                                                                   \
                v[r] = VALUES(blk[r]);                                                                      \
                va[r] = SIGNED ? _mm256_abs_epi8(v[r]) : v[r];                                              \
            }                                                                                               \
            __m128 D = DVEC(blk), Dm = DMVEC(blk, D);                                                       \
            for (int64_t c = 0; c < m; c++) {                                                               \
                __m256i x = x32(a, c, 32 * b), p[4];                                                        \
                for (int r = 0; r < 4; r++)                                                                 \
                    p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(va[r], SIGNED ? _mm256_sign_epi8(x, v[r]) : x), ones); \
                __m128i isum = hsum4(p[0], p[1], p[2], p[3]);                                               \
                const int16_t *g = a->g + c * (k / 16) + 2 * b;                                             \
                __m128i osum = _mm_set1_epi32((OFFSET) * (g[0] + g[1]));                                    \
                acc[c] = accumulate(acc[c], isum, D, osum, Dm, a->d[c * nb + b], (OFFSET) != 0);               \
            }                                                                                               \
        }                                                                                                   \
        for (int64_t c = 0; c < m; c++) _mm_storeu_ps(out + c * ld, acc[c]);                                \
    }

static inline __m256i nibbles(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
}

/* The fifth bits of Q5_0/Q5_1: bit j of the u32 qh -> 16 at byte j (ggml's bytes_from_bits_32). */
static inline __m256i fifth_bits(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    bytes = _mm256_or_si256(bytes, bit);
    bytes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    return _mm256_and_si256(bytes, _mm256_set1_epi8(16));
}

#define Q4_0_VALUES(p) nibbles((p) + 2)
#define Q4_1_VALUES(p) nibbles((p) + 4)
#define Q5_0_VALUES(p) _mm256_or_si256(nibbles((p) + 6), fifth_bits((p) + 2))
#define Q5_1_VALUES(p) _mm256_or_si256(nibbles((p) + 8), fifth_bits((p) + 4))
#define Q8_0_VALUES(p) _mm256_loadu_si256((const __m256i *)((p) + 2))
/* Table types: each nibble picks its value from a 16-entry table (vpshufb). IQ4_NL's are signed; MXFP4's are
   e2m1 + 12 as unpack_impl.h stores them (unsigned, the offset 12 x -D). */
#define TABLE_VALUES(p, table) _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table))), nibbles(p))
static const int8_t kvalues_iq4nl_gemv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const uint8_t kvalues_mxfp4_gemv[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
#define IQ4_NL_VALUES(p) TABLE_VALUES((p) + 2, kvalues_iq4nl_gemv)
#define MXFP4_VALUES(p) TABLE_VALUES((p) + 1, kvalues_mxfp4_gemv)

/* MXFP4's scale: an E8M0 byte e, the block's value 2^(e - 128) (ggml_e8m0_to_fp32_half), as unpack_impl.h reads it. */
static inline float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
#define D_E8M0(blk) _mm_setr_ps(e8m0_half((blk)[0][0]), e8m0_half((blk)[1][0]), e8m0_half((blk)[2][0]), e8m0_half((blk)[3][0]))
#define D_AT0(blk) fp16x4(blk, 0)
#define DM_NEG(blk, D) _mm_sub_ps(_mm_setzero_ps(), D)
#define DM_AT2(blk, D) fp16x4(blk, 2)
#define DM_ZERO(blk, D) _mm_setzero_ps()

DEFINE_GEMV32(gemv_q4_0, 18, 0, Q4_0_VALUES, D_AT0, DM_NEG, 8)
DEFINE_GEMV32(gemv_q4_1, 20, 0, Q4_1_VALUES, D_AT0, DM_AT2, 1)
DEFINE_GEMV32(gemv_q5_0, 22, 0, Q5_0_VALUES, D_AT0, DM_NEG, 16)
DEFINE_GEMV32(gemv_q5_1, 24, 0, Q5_1_VALUES, D_AT0, DM_AT2, 1)
DEFINE_GEMV32(gemv_q8_0, 34, 1, Q8_0_VALUES, D_AT0, DM_ZERO, 0)
DEFINE_GEMV32(gemv_iq4_nl, 18, 1, IQ4_NL_VALUES, D_AT0, DM_ZERO, 0)
DEFINE_GEMV32(gemv_mxfp4, 17, 0, MXFP4_VALUES, D_E8M0, DM_NEG, 12)

gemv_fn gemv_lookup_avx2(int type) {
    switch (type) {
        case T_Q4_0: return gemv_q4_0;
        case T_Q4_1: return gemv_q4_1;
        case T_Q5_0: return gemv_q5_0;
        case T_Q5_1: return gemv_q5_1;
        case T_Q8_0: return gemv_q8_0;
        case T_IQ4_NL: return gemv_iq4_nl;
        case T_MXFP4: return gemv_mxfp4;
        case T_Q4_K: return gemv_q4_k;
        case T_Q6_K: return gemv_q6_k;
        default: return NULL;
    }
}
#endif
