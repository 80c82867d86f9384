/* AVX-512 VNNI kernels over the row-interleaved layouts of repack.c (the same bytes gemm_x8_avx2.c reads).

   One 32-byte register holds four consecutive values of all eight rows, so one vpdpbusd against x's four values
   broadcast adds each row's four products straight into its int32 lane: it replaces gemm_x8_avx2.c's vpmaddubsw,
   the int16 adds and the vpmaddwd (no int16 lane to overflow, so no step limit). The operand order is vpdpbusd's:
   unsigned weights (nibbles, Q6_K's 6 bits; Q8_0's int8 values biased by 128, the bias taken back with x's block
   sums) times signed activations. The scales are then applied per row in int32 (vpmulld). Integer sums are exact
   in any order and every pair's float operations are gemm_x8_avx2.c's, so the results are the same bits as the
   AVX2 and portable kernels'.

   256-bit vectors with AVX-512VL (the EVEX encoding gives 32 registers): four columns of x per pass instead of
   two, which spreads each register of decoded weights over twice the products. Zen 4 runs 512-bit operations as
   two 256-bit halves, so wider registers would only halve the instruction count, not the work.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <string.h>

#include "repack.h"

static inline __m256i bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* 8 bytes (one per row) -> the int16 pairs (s, s) vpmaddwd wants, one per row. */
static inline __m256i pairs_u8(const uint8_t *p) {
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}

static inline __m256i u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

static inline __m256 fp16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static inline __m256 neg(__m256 v) { return _mm256_sub_ps(_mm256_setzero_ps(), v); }

/* Columns of x four at a time, then two, then one: PER_BLOCK(C) adds every block's part for columns c0..c0+C-1. */
#define RUN_COLUMNS(PER_BLOCK, C)                                                                           \
    {                                                                                                       \
        __m256 f[C];                                                                                        \
        for (int c = 0; c < C; c++) f[c] = _mm256_setzero_ps();                                             \
        PER_BLOCK(C)                                                                                        \
        for (int c = 0; c < C; c++) _mm256_storeu_ps(acc + (c0 + c) * 8, f[c]);                             \
    }

#define KERNEL_BODY(PER_BLOCK)                                                                              \
    int64_t c0 = 0;                                                                                         \
    for (; c0 + 4 <= a->m; c0 += 4) RUN_COLUMNS(PER_BLOCK, 4)                                               \
    if (a->m - c0 >= 2) {                                                                                   \
        RUN_COLUMNS(PER_BLOCK, 2)                                                                           \
        c0 += 2;                                                                                            \
    }                                                                                                       \
    if (c0 < a->m) RUN_COLUMNS(PER_BLOCK, 1)

/* Independent accumulator chains per column: vpdpbusd's latency needs ~8 in flight, four columns have them. */
#define CHAINS(C) ((C) >= 4 ? 1 : 2)

/* ---- Q4_K: nibbles, 6-bit scales and mins; sub-block 2t of a super-block is the low nibbles of registers
   (t, 0..7), sub-block 2t + 1 their high nibbles ---- */
#define Q4_K_BLOCKS(C)                                                                                      \
    for (int64_t sb = 0; sb < k / 256; sb++) {                                                              \
        const uint8_t *g = group + sb * 1184;                                                               \
        x8_prefetch(g, 1184);                                                                               \
        __m256i t[C], os[C];                                                                                \
        for (int c = 0; c < C; c++) t[c] = os[c] = _mm256_setzero_si256();                                  \
        for (int t2 = 0; t2 < 4; t2++) {                                                                    \
            __m256i dl[CHAINS(C)][C], dh[CHAINS(C)][C];                                                     \
            for (int u = 0; u < CHAINS(C); u++)                                                             \
                for (int c = 0; c < C; c++) dl[u][c] = dh[u][c] = _mm256_setzero_si256();                   \
            for (int i = 0; i < 8; i++) {                                                                   \
                const int u = i % CHAINS(C);                                                                \
                __m256i w = _mm256_loadu_si256((const __m256i *)(g + 160 + 32 * (8 * t2 + i)));             \
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);   \
                for (int c = 0; c < C; c++) {                                                               \
                    const int8_t *q = a->q + (c0 + c) * k + 256 * sb + 64 * t2 + 4 * i;                     \
                    dl[u][c] = _mm256_dpbusd_epi32(dl[u][c], lo, bcast4(q));                                \
                    dh[u][c] = _mm256_dpbusd_epi32(dh[u][c], hi, bcast4(q + 32));                           \
                }                                                                                           \
            }                                                                                               \
            __m256i slo = u8x8(g + 32 + 16 * t2), shi = u8x8(g + 32 + 16 * t2 + 8);                         \
            __m256i mlo = pairs_u8(g + 96 + 16 * t2), mhi = pairs_u8(g + 96 + 16 * t2 + 8);                 \
            for (int c = 0; c < C; c++) {                                                                   \
                __m256i sl = dl[0][c], sh = dh[0][c];                                                       \
                for (int u = 1; u < CHAINS(C); u++) {                                                       \
                    sl = _mm256_add_epi32(sl, dl[u][c]);                                                    \
                    sh = _mm256_add_epi32(sh, dh[u][c]);                                                    \
                }                                                                                           \
                const int16_t *gs = a->g + (c0 + c) * (k / 16) + 16 * sb + 4 * t2;                          \
                t[c] = _mm256_add_epi32(t[c], _mm256_add_epi32(_mm256_mullo_epi32(sl, slo),                 \
                                                               _mm256_mullo_epi32(sh, shi)));               \
                os[c] = _mm256_add_epi32(os[c], _mm256_add_epi32(_mm256_madd_epi16(mlo, bcast4(gs)),        \
                                                                 _mm256_madd_epi16(mhi, bcast4(gs + 2))));  \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = fp16x8(g), Dm = neg(fp16x8(g + 16));                                                     \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256 d = _mm256_set1_ps(a->d[(c0 + c) * (k / 256) + sb]);                                     \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]), _mm256_mul_ps(D, d), f[c]);                    \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(os[c]), _mm256_mul_ps(Dm, d), f[c]);                  \
        }                                                                                                   \
    }

static void x8_q4_k(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    KERNEL_BODY(Q4_K_BLOCKS)
}

/* Loops over an array of registers must unroll fully, or the array lives on the stack. */
#define UNROLL _Pragma("GCC unroll 16")

/* ---- Q6_K: 4 + 2 bits, int8 scales per 16 values, offsets 32 s. Step s (values 4s..4s+3, group s / 4) is the
   low (s < 32) or high nibble of L_{s % 32} and bits 2 (s / 16) of H_{s % 16}; so steps p, p + 16, p + 32, p + 48
   share the registers L_p, L_{p+16}, H_p, and the four steps p = 4 p4 + e (e = 0..3) make group p4 + 4j ---- */
/* Bits hshift, hshift + 1 of h moved to bits 4-5 in one shift (none for 4), then masked and or-ed in one vpternlog:
   within each byte, as 16-bit shifts leave bits 4-5 to the byte's own bits. */
static inline __m256i q6_values(__m256i l, __m256i h, int lshift, int hshift, __m256i m4, __m256i m30) {
    __m256i lo = _mm256_and_si256(lshift ? _mm256_srli_epi16(l, 4) : l, m4);
    __m256i hi = hshift < 4 ? _mm256_slli_epi16(h, 4 - hshift) : hshift > 4 ? _mm256_srli_epi16(h, hshift - 4) : h;
    return _mm256_ternarylogic_epi32(lo, hi, m30, 0xF8); /* lo | (hi & m30) */
}

/* The int8 scales of group grp for the 8 rows, as int32: pair u = grp / 2 holds (s_2u, s_2u+1) per row. */
static inline __m256i q6_scales(const uint8_t *g, int grp) {
    __m256i pair = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * (grp / 2))));
    return (grp & 1) ? _mm256_srai_epi32(pair, 16) : _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16);
}

#define Q6_K_BLOCKS(C)                                                                                      \
    for (int64_t sb = 0; sb < k / 256; sb++) {                                                              \
        const uint8_t *g = group + sb * 1680, *L = g + 144, *H = g + 144 + 1024;                            \
        x8_prefetch(g, 1680);                                                                               \
        __m256i t[C], os[C];                                                                                \
        for (int c = 0; c < C; c++) t[c] = os[c] = _mm256_setzero_si256();                                  \
        for (int p4 = 0; p4 < 4; p4++) {                                                                    \
            __m256i dj[4][C];                                                                               \
            for (int j = 0; j < 4; j++)                                                                     \
                for (int c = 0; c < C; c++) dj[j][c] = _mm256_setzero_si256();                              \
            UNROLL for (int e = 0; e < 4; e++) {                                                            \
                const int p = 4 * p4 + e;                                                                   \
                __m256i lp = _mm256_loadu_si256((const __m256i *)(L + 32 * p));                             \
                __m256i lq = _mm256_loadu_si256((const __m256i *)(L + 32 * (p + 16)));                      \
                __m256i hp = _mm256_loadu_si256((const __m256i *)(H + 32 * p));                             \
                __m256i v[4] = {q6_values(lp, hp, 0, 0, m4, m30), q6_values(lq, hp, 0, 2, m4, m30),         \
                                q6_values(lp, hp, 1, 4, m4, m30), q6_values(lq, hp, 1, 6, m4, m30)};        \
                for (int c = 0; c < C; c++) {                                                               \
                    const int8_t *q = a->q + (c0 + c) * k + 256 * sb + 4 * p;                               \
                    for (int j = 0; j < 4; j++) dj[j][c] = _mm256_dpbusd_epi32(dj[j][c], v[j], bcast4(q + 64 * j)); \
                }                                                                                           \
            }                                                                                               \
            for (int j = 0; j < 4; j++) {                                                                   \
                __m256i s = q6_scales(g, p4 + 4 * j);                                                       \
                for (int c = 0; c < C; c++) t[c] = _mm256_add_epi32(t[c], _mm256_mullo_epi32(dj[j][c], s)); \
            }                                                                                               \
        }                                                                                                   \
        for (int u = 0; u < 8; u++) {                                                                       \
            __m256i o = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * u))), 5); \
            for (int c = 0; c < C; c++)                                                                     \
                os[c] = _mm256_add_epi32(os[c], _mm256_madd_epi16(o, bcast4(a->g + (c0 + c) * (k / 16) + 16 * sb + 2 * u))); \
        }                                                                                                   \
        __m256 D = fp16x8(g), Dm = neg(D);                                                                  \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256 d = _mm256_set1_ps(a->d[(c0 + c) * (k / 256) + sb]);                                     \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]), _mm256_mul_ps(D, d), f[c]);                    \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(os[c]), _mm256_mul_ps(Dm, d), f[c]);                  \
        }                                                                                                   \
    }

static void x8_q6_k(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    KERNEL_BODY(Q6_K_BLOCKS)
}

/* ---- Q8_0: int8 values. vpdpbusd wants unsigned ones: w + 128 (w ^ 0x80) times x, less 128 x's block sum,
   which the accumulators start from ---- */
#define Q8_0_BLOCKS(C)                                                                                      \
    for (int64_t b = 0; b < k / 32; b++) {                                                                  \
        const uint8_t *g = group + b * 272;                                                                 \
        x8_prefetch(g, 272);                                                                                \
        __m256i t[CHAINS(C)][C];                                                                            \
        for (int c = 0; c < C; c++) {                                                                       \
            const int16_t *gs = a->g + (c0 + c) * (k / 16) + 2 * b;                                         \
            t[0][c] = _mm256_set1_epi32(-128 * (gs[0] + gs[1]));                                            \
            for (int u = 1; u < CHAINS(C); u++) t[u][c] = _mm256_setzero_si256();                           \
        }                                                                                                   \
        for (int i = 0; i < 8; i++) {                                                                       \
            const int u = i % CHAINS(C);                                                                    \
            __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(g + 16 + 32 * i)), bias);     \
            for (int c = 0; c < C; c++)                                                                     \
                t[u][c] = _mm256_dpbusd_epi32(t[u][c], w, bcast4(a->q + (c0 + c) * k + 32 * b + 4 * i));    \
        }                                                                                                   \
        __m256 D = fp16x8(g);                                                                               \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256i sum = t[0][c];                                                                          \
            for (int u = 1; u < CHAINS(C); u++) sum = _mm256_add_epi32(sum, t[u][c]);                       \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),                                                 \
                                   _mm256_mul_ps(D, _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b])), f[c]);  \
        }                                                                                                   \
    }

static void x8_q8_0(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    KERNEL_BODY(Q8_0_BLOCKS)
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1: 4- or 5-bit values, scale 1, offset o x (sum of q); register i holds values
   4i + e (low nibbles) and 16 + 4i + e (high nibbles) ---- */
/* The 5th bits of step j for the 8 rows: bit 4j + e of row r's qh -> 16 at byte (r, e) (gemm_x8_avx2.c's). */
static inline __m256i fifth_bits_x8(__m256i qh, int j) {
    const __m256i dup = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4,
                                         8, 8, 8, 8, 12, 12, 12, 12);
    const __m256i bit = _mm256_set1_epi32(0x08040201);
    __m256i b = _mm256_shuffle_epi8(_mm256_srli_epi32(qh, 4 * j), dup);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit), _mm256_set1_epi8(16));
}

#define SMALL_BLOCKS(C, HAS_M, HAS_QH, OFFSET)                                                              \
    for (int64_t b = 0; b < k / 32; b++) {                                                                  \
        const uint8_t *g = group + b * (16 + 16 * HAS_M + 32 * HAS_QH + 128);                               \
        const uint8_t *qs = g + 16 + 16 * HAS_M + 32 * HAS_QH;                                              \
        x8_prefetch(g, 16 + 16 * HAS_M + 32 * HAS_QH + 128);                                                \
        __m256i qh = HAS_QH ? _mm256_loadu_si256((const __m256i *)(g + 16 + 16 * HAS_M)) : m4;              \
        __m256i t[2][C];                                                                                    \
        for (int c = 0; c < C; c++) t[0][c] = t[1][c] = _mm256_setzero_si256();                             \
        for (int i = 0; i < 4; i++) {                                                                       \
            __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));                                 \
            __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);       \
            if (HAS_QH) {                                                                                   \
                lo = _mm256_or_si256(lo, fifth_bits_x8(qh, i));                                             \
                hi = _mm256_or_si256(hi, fifth_bits_x8(qh, i + 4));                                         \
            }                                                                                               \
            for (int c = 0; c < C; c++) {                                                                   \
                const int8_t *q = a->q + (c0 + c) * k + 32 * b + 4 * i;                                     \
                t[0][c] = _mm256_dpbusd_epi32(t[0][c], lo, bcast4(q));                                      \
                t[1][c] = _mm256_dpbusd_epi32(t[1][c], hi, bcast4(q + 16));                                 \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = fp16x8(g), Dm = HAS_M ? fp16x8(g + 16) : neg(D);                                         \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256 d = _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b]);                                       \
            const int16_t *gs = a->g + (c0 + c) * (k / 16) + 2 * b;                                         \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(t[0][c], t[1][c])),                  \
                                   _mm256_mul_ps(D, d), f[c]);                                              \
            __m256 os = _mm256_set1_ps((float)((OFFSET) * (gs[0] + gs[1])));                                \
            f[c] = _mm256_fmadd_ps(os, _mm256_mul_ps(Dm, d), f[c]);                                         \
        }                                                                                                   \
    }

#define DEFINE_SMALL(NAME)                                                                                  \
    static void NAME(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {                       \
        const __m256i m4 = _mm256_set1_epi8(0xF);                                                           \
        KERNEL_BODY(NAME##_BLOCKS)                                                                          \
    }

#define x8_q4_0_BLOCKS(C) SMALL_BLOCKS(C, 0, 0, 8)
#define x8_q4_1_BLOCKS(C) SMALL_BLOCKS(C, 1, 0, 1)
#define x8_q5_0_BLOCKS(C) SMALL_BLOCKS(C, 0, 1, 16)
#define x8_q5_1_BLOCKS(C) SMALL_BLOCKS(C, 1, 1, 1)
DEFINE_SMALL(x8_q4_0)
DEFINE_SMALL(x8_q4_1)
DEFINE_SMALL(x8_q5_0)
DEFINE_SMALL(x8_q5_1)

/* The VNNI kernel for each interleaved layout of repack.c (the AVX2 kernels read the same bytes). */
x8_kernel x8_kernel_vnni(int type) {
    switch (type) {
        case T_Q8_0: return x8_q8_0;
        case T_Q4_K: return x8_q4_k;
        case T_Q6_K: return x8_q6_k;
        case T_Q4_0: return x8_q4_0;
        case T_Q4_1: return x8_q4_1;
        case T_Q5_0: return x8_q5_0;
        case T_Q5_1: return x8_q5_1;
        default: return x8_kernel_avx2(type); /* IQ4_NL, MXFP4: the AVX2 kernels (AVX-512 CPUs run them too) */
    }
}
#endif
