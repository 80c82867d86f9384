/* AVX2 kernels over the row-interleaved layouts of repack.c: 8 weight rows x every row of x, two at a time.

   One 32-byte load gives four consecutive values of all eight rows; vpmaddubsw against x's four values broadcast
   gives each row's two pair sums, which add up in int16 for as many steps as the type's values allow (Q4_K 8,
   Q6_K 2, Q8_0 1) before vpmaddwd applies the rows' scales. Lanes are rows, so every pair's float operations are
   the canonical arithmetic's (lexi_cpu.h), bit for bit the portable kernels' result on the file's own blocks.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
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

static inline __m256 fp16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static inline __m256 neg(__m256 v) { return _mm256_sub_ps(_mm256_setzero_ps(), v); }

/* Columns of x two at a time, then the odd one out: PER_BLOCK(C) adds every block's part for columns c0..c0+C-1. */
#define KERNEL_BODY(PER_BLOCK)                                                                              \
    for (int64_t c0 = 0; c0 + 2 <= a->m; c0 += 2) {                                                         \
        __m256 f[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                           \
        PER_BLOCK(2)                                                                                        \
        for (int c = 0; c < 2; c++) _mm256_storeu_ps(acc + (c0 + c) * 8, f[c]);                             \
    }                                                                                                       \
    if (a->m & 1) {                                                                                         \
        int64_t c0 = a->m - 1;                                                                              \
        __m256 f[1] = {_mm256_setzero_ps()};                                                                \
        PER_BLOCK(1)                                                                                        \
        _mm256_storeu_ps(acc + c0 * 8, f[0]);                                                               \
    }

/* ---- Q8_0: signed values, one step per vpmaddwd, no offsets ---- */
#define Q8_0_BLOCKS(C)                                                                                      \
    for (int64_t b = 0; b < k / 32; b++) {                                                                  \
        const uint8_t *g = group + b * 272;                                                                 \
        x8_prefetch(g, 272);                                                                                \
        __m256i t[C];                                                                                       \
        for (int c = 0; c < C; c++) t[c] = _mm256_setzero_si256();                                          \
        for (int i = 0; i < 8; i++) {                                                                       \
            __m256i w = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * i)), aw = _mm256_abs_epi8(w);    \
            for (int c = 0; c < C; c++) {                                                                   \
                __m256i x = bcast4(a->q + (c0 + c) * k + 32 * b + 4 * i);                                   \
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));                               \
                t[c] = _mm256_add_epi32(t[c], _mm256_madd_epi16(p, ones));                                  \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = fp16x8(g);                                                                               \
        for (int c = 0; c < C; c++)                                                                         \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]),                                                \
                                   _mm256_mul_ps(D, _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b])), f[c]);  \
    }

static void x8_q8_0(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    KERNEL_BODY(Q8_0_BLOCKS)
}

/* ---- Q4_K: nibbles, 8 steps per vpmaddwd, 6-bit scales and mins ---- */
#define Q4_K_BLOCKS(C)                                                                                      \
    for (int64_t sb = 0; sb < k / 256; sb++) {                                                              \
        const uint8_t *g = group + sb * 1184;                                                               \
        x8_prefetch(g, 1184);                                                                               \
        __m256i t[C], os[C];                                                                                \
        for (int c = 0; c < C; c++) t[c] = os[c] = _mm256_setzero_si256();                                  \
        for (int t2 = 0; t2 < 4; t2++) {                                                                    \
            __m256i hl[C], hh[C];                                                                           \
            for (int i = 0; i < 8; i++) {                                                                   \
                __m256i w = _mm256_loadu_si256((const __m256i *)(g + 160 + 32 * (8 * t2 + i)));             \
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);   \
                for (int c = 0; c < C; c++) {                                                               \
                    const int8_t *q = a->q + (c0 + c) * k + 256 * sb + 64 * t2 + 4 * i;                     \
                    __m256i pl = _mm256_maddubs_epi16(lo, bcast4(q));                                       \
                    __m256i ph = _mm256_maddubs_epi16(hi, bcast4(q + 32));                                  \
                    hl[c] = i ? _mm256_add_epi16(hl[c], pl) : pl;                                           \
                    hh[c] = i ? _mm256_add_epi16(hh[c], ph) : ph;                                           \
                    /* an empty asm that takes the sums here: else gcc computes all 16 products first and    \
                       spills them (Q4_K 1.2x at one row of x, 1.25-1.3x at four; bench in the commit) */    \
                    __asm__("" : "+x"(hl[c]), "+x"(hh[c]));                                                 \
                }                                                                                           \
            }                                                                                               \
            __m256i slo = pairs_u8(g + 32 + 16 * t2), shi = pairs_u8(g + 32 + 16 * t2 + 8);                 \
            __m256i mlo = pairs_u8(g + 96 + 16 * t2), mhi = pairs_u8(g + 96 + 16 * t2 + 8);                 \
            for (int c = 0; c < C; c++) {                                                                   \
                const int16_t *gs = a->g + (c0 + c) * (k / 16) + 16 * sb + 4 * t2;                          \
                t[c] = _mm256_add_epi32(t[c], _mm256_add_epi32(_mm256_madd_epi16(hl[c], slo),               \
                                                               _mm256_madd_epi16(hh[c], shi)));             \
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

/* ---- Q6_K: 4 + 2 bits, 2 steps per vpmaddwd, int8 scales per 16 values, offsets 32 s ---- */
static inline __m256i q6_values(__m256i l, __m256i h, int lshift, int hshift, __m256i m4, __m256i m2) {
    __m256i lo = _mm256_and_si256(lshift ? _mm256_srli_epi16(l, 4) : l, m4);
    __m256i hi = _mm256_and_si256(hshift ? _mm256_srli_epi16(h, hshift) : h, m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

#define Q6_K_BLOCKS(C)                                                                                      \
    for (int64_t sb = 0; sb < k / 256; sb++) {                                                              \
        const uint8_t *g = group + sb * 1680, *L = g + 144, *H = g + 144 + 1024;                            \
        x8_prefetch(g, 1680);                                                                               \
        __m256i t[C], os[C];                                                                                \
        for (int c = 0; c < C; c++) t[c] = os[c] = _mm256_setzero_si256();                                  \
        for (int p = 0; p < 16; p += 2) {                                                                   \
            /* steps p + 16j and p + 1 + 16j (j = 0..3) share group p / 4 + 4j */                           \
            __m256i h4[4][C];                                                                               \
            for (int e = 0; e < 2; e++) {                                                                   \
                __m256i lp = _mm256_loadu_si256((const __m256i *)(L + 32 * (p + e)));                       \
                __m256i lq = _mm256_loadu_si256((const __m256i *)(L + 32 * (p + e + 16)));                  \
                __m256i hp = _mm256_loadu_si256((const __m256i *)(H + 32 * (p + e)));                       \
                __m256i v[4] = {q6_values(lp, hp, 0, 0, m4, m2), q6_values(lq, hp, 0, 2, m4, m2),           \
                                q6_values(lp, hp, 1, 4, m4, m2), q6_values(lq, hp, 1, 6, m4, m2)};          \
                for (int c = 0; c < C; c++) {                                                               \
                    const int8_t *q = a->q + (c0 + c) * k + 256 * sb + 4 * (p + e);                         \
                    for (int j = 0; j < 4; j++) {                                                           \
                        __m256i pj = _mm256_maddubs_epi16(v[j], bcast4(q + 64 * j));                        \
                        h4[j][c] = e ? _mm256_add_epi16(h4[j][c], pj) : pj;                                 \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            for (int j = 0; j < 4; j++) {                                                                   \
                int grp = p / 4 + 4 * j;                                                                    \
                __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * (grp / 2)))); \
                __m256i s = _mm256_shuffle_epi8(sp, (grp & 1) ? odd : even);                                \
                for (int c = 0; c < C; c++) t[c] = _mm256_add_epi32(t[c], _mm256_madd_epi16(h4[j][c], s));  \
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
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const __m256i even = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4,
                                          5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i odd = _mm256_add_epi8(even, _mm256_set1_epi8(2));
    KERNEL_BODY(Q6_K_BLOCKS)
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1: 8 (4-bit) or 4 (5-bit) steps per vpmaddwd, scale 1, offset o x (sum of q) ---- */
/* The 5th bits of step j for the 8 rows: bit 4j + e of row r's qh -> 16 at byte (r, e). */
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
        __m256i t[C], h[C];                                                                                 \
        for (int i = 0; i < 4; i++) { /* register i: steps i (low nibbles) and i + 4 (high) */              \
            __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));                                 \
            __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);       \
            if (HAS_QH) {                                                                                   \
                lo = _mm256_or_si256(lo, fifth_bits_x8(qh, i));                                             \
                hi = _mm256_or_si256(hi, fifth_bits_x8(qh, i + 4));                                         \
            }                                                                                               \
            for (int c = 0; c < C; c++) {                                                                   \
                const int8_t *q = a->q + (c0 + c) * k + 32 * b + 4 * i;                                     \
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(q)),                            \
                                             _mm256_maddubs_epi16(hi, bcast4(q + 16)));                     \
                h[c] = (i == 0 || (HAS_QH && i == 2)) ? p : _mm256_add_epi16(h[c], p);                      \
                /* int16 lanes hold 8 steps of 4-bit values, 4 of 5-bit ones */                             \
                if (HAS_QH && i == 1) t[c] = _mm256_madd_epi16(h[c], ones);                                 \
                if (i == 3) {                                                                               \
                    __m256i tail = _mm256_madd_epi16(h[c], ones);                                           \
                    t[c] = HAS_QH ? _mm256_add_epi32(t[c], tail) : tail;                                    \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = fp16x8(g), Dm = HAS_M ? fp16x8(g + 16) : neg(D);                                         \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256 d = _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b]);                                       \
            const int16_t *gs = a->g + (c0 + c) * (k / 16) + 2 * b;                                         \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]), _mm256_mul_ps(D, d), f[c]);                    \
            __m256 os = _mm256_set1_ps((float)((OFFSET) * (gs[0] + gs[1])));                                \
            f[c] = _mm256_fmadd_ps(os, _mm256_mul_ps(Dm, d), f[c]);                                         \
        }                                                                                                   \
    }

#define DEFINE_SMALL(NAME)                                                                                  \
    static void NAME(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {                       \
        const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);                              \
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

/* ---- IQ4_NL and MXFP4: each nibble picks its value from a 16-entry table (vpshufb), Q4_0's registers ---- */
static const int8_t iq4_nl_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* e2m1 + 12 (unsigned, as unpack_impl.h stores MXFP4), the 12 taken back by the offset 12 x -D */
static const uint8_t mxfp4_table[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

static inline __m256i table16(const void *t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* Eight E8M0 bytes -> 2^(e - 128) as floats (ggml_e8m0_to_fp32_half; e < 2 are the subnormals 2^-128, 2^-127). */
static inline __m256 e8m0_half_x8(const uint8_t *p) {
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* Signed values of up to 127: one step per vpmaddwd, as Q8_0. */
#define IQ4_NL_BLOCKS(C)                                                                                    \
    for (int64_t b = 0; b < k / 32; b++) {                                                                  \
        const uint8_t *g = group + b * 144, *qs = g + 16;                                                   \
        x8_prefetch(g, 144);                                                                                \
        __m256i t[C];                                                                                       \
        for (int c = 0; c < C; c++) t[c] = _mm256_setzero_si256();                                          \
        for (int i = 0; i < 4; i++) {                                                                       \
            __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));                                 \
            __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(w, m4));                               \
            __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));         \
            __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);                                   \
            for (int c = 0; c < C; c++) {                                                                   \
                const int8_t *q = a->q + (c0 + c) * k + 32 * b + 4 * i;                                     \
                __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast4(q), lo));                    \
                __m256i ph = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast4(q + 16), hi));               \
                t[c] = _mm256_add_epi32(t[c], _mm256_add_epi32(_mm256_madd_epi16(pl, ones),                 \
                                                               _mm256_madd_epi16(ph, ones)));               \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = fp16x8(g);                                                                               \
        for (int c = 0; c < C; c++)                                                                         \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]),                                                \
                                   _mm256_mul_ps(D, _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b])), f[c]);  \
    }

static void x8_iq4_nl(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1), table = table16(iq4_nl_table);
    KERNEL_BODY(IQ4_NL_BLOCKS)
}

/* Unsigned values of up to 24: two registers (four steps) per vpmaddwd, then the offset 12 x -D. */
#define MXFP4_BLOCKS(C)                                                                                     \
    for (int64_t b = 0; b < k / 32; b++) {                                                                  \
        const uint8_t *g = group + b * 136, *qs = g + 8;                                                    \
        x8_prefetch(g, 136);                                                                                \
        __m256i t[C], h[C];                                                                                 \
        for (int i = 0; i < 4; i++) {                                                                       \
            __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));                                 \
            __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(w, m4));                               \
            __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));         \
            for (int c = 0; c < C; c++) {                                                                   \
                const int8_t *q = a->q + (c0 + c) * k + 32 * b + 4 * i;                                     \
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(q)),                            \
                                             _mm256_maddubs_epi16(hi, bcast4(q + 16)));                     \
                h[c] = (i & 1) ? _mm256_add_epi16(h[c], p) : p;                                             \
                if (i == 1) t[c] = _mm256_madd_epi16(h[c], ones);                                           \
                if (i == 3) t[c] = _mm256_add_epi32(t[c], _mm256_madd_epi16(h[c], ones));                   \
            }                                                                                               \
        }                                                                                                   \
        __m256 D = e8m0_half_x8(g), Dm = neg(D);                                                            \
        for (int c = 0; c < C; c++) {                                                                       \
            __m256 d = _mm256_set1_ps(a->d[(c0 + c) * (k / 32) + b]);                                       \
            const int16_t *gs = a->g + (c0 + c) * (k / 16) + 2 * b;                                         \
            f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]), _mm256_mul_ps(D, d), f[c]);                    \
            f[c] = _mm256_fmadd_ps(_mm256_set1_ps((float)(12 * (gs[0] + gs[1]))), _mm256_mul_ps(Dm, d), f[c]); \
        }                                                                                                   \
    }

static void x8_mxfp4(const uint8_t *group, int64_t k, const act_q8 *a, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1), table = table16(mxfp4_table);
    KERNEL_BODY(MXFP4_BLOCKS)
}

x8_kernel x8_kernel_avx2(int type) {
    switch (type) {
        case T_Q8_0: return x8_q8_0;
        case T_Q4_K: return x8_q4_k;
        case T_Q6_K: return x8_q6_k;
        case T_Q4_0: return x8_q4_0;
        case T_Q4_1: return x8_q4_1;
        case T_Q5_0: return x8_q5_0;
        case T_Q5_1: return x8_q5_1;
        case T_IQ4_NL: return x8_iq4_nl;
        case T_MXFP4: return x8_mxfp4;
        default: return NULL;
    }
}
#endif
