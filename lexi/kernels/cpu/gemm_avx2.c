/* The AVX2 kernels (x86-64 with AVX2, FMA, F16C), chosen at run time where the CPU has them.

   A strip's STRIP = 8 rows are unpacked and interleaved four values at a time (the layout llama.cpp repacks its
   weights into at load; here it is built per chunk, so nothing but the file's blocks stays in memory): one
   register holds values 4j..4j+3 of all eight rows, and vpmaddubsw against x's four values broadcast gives each
   row's two pair sums. Those add up in int16 lanes for `steps` steps (the type's value range decides how many
   cannot overflow), then one vpmaddwd applies the eight rows' scales: far fewer multiplies than one vpmaddwd per
   vpmaddubsw. Every lane is one row, so a pair's float operations are exactly gemm_scalar.c's.
*/
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include <string.h>

#include "lexi_cpu.h"

#define FP16(p) _cvtsh_ss((unsigned short)((p)[0] | ((p)[1] << 8)))
#define UNPACK_LOOKUP lookup_avx2
#include "unpack_impl.h"

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static inline __m256 abs_max(__m256 acc, __m256 v) { return _mm256_max_ps(acc, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v)); }

/* One activation block: q, its scale and the int16 sums of every 16 values (gemm_scalar.c's quantize_block). */
static void quantize_block(const float *xb, int B, int8_t *q, float *d, int16_t *g) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < B; j += 8) mx = abs_max(mx, _mm256_loadu_ps(xb + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    *d = scale;
    __m256 vi = _mm256_set1_ps(inv);
    for (int j = 0; j < B; j += 32) {
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j), vi));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 8), vi));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 16), vi));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 24), vi));
        g[j / 16] = (int16_t)hsum_i32(_mm256_add_epi32(i0, i1));
        g[j / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(i2, i3));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + j), _mm256_permutevar8x32_epi32(p, order));
    }
}

static void quantize_avx2(const float *x, int64_t ldx, int64_t row0, int64_t rows, act_q8 *a, int64_t second) {
    const int64_t k = a->k;
    const int B = a->block;
    float rest[256];
    for (int64_t r = row0; r < row0 + rows; r++) {
        const float *xr = x + r * ldx;
        for (int64_t b = 0; b < k / B; b++) {
            int8_t *q = a->q + r * k + B * b;
            float *d = a->d + r * (k / B) + b;
            quantize_block(xr + B * b, B, q, d, a->g + r * (k / 16) + (B / 16) * b);
            if (second < 0) continue;
            __m256 vd = _mm256_set1_ps(*d);
            for (int j = 0; j < B; j += 8) {
                __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + j))));
                _mm256_storeu_ps(rest + j, _mm256_sub_ps(_mm256_loadu_ps(xr + B * b + j), _mm256_mul_ps(vd, qf)));
            }
            int64_t r2 = second + r;
            quantize_block(rest, B, a->q + r2 * k + B * b, a->d + r2 * (k / B) + b, a->g + r2 * (k / 16) + (B / 16) * b);
        }
    }
}

/* The strip's chunk, interleaved: v[j][r][4] (value 4j+i of row r), s[g][r], o[g/2][r][2], D[b][r], Dm[b][r]. */
typedef struct {
    uint8_t v[KC * STRIP];
    int32_t s[KC / 16 * STRIP];
    int16_t o[KC / 16 * STRIP];
    float D[KC / QA * STRIP], Dm[KC / QA * STRIP];
    uint8_t rows[STRIP][KC]; /* each row's values as unpacked, before interleaving */
} strip_chunk;

_Static_assert(sizeof(strip_chunk) <= STRIP_WORK, "STRIP_WORK too small for the AVX2 kernel");

/* 8 x 8 transpose of 32-bit words: r[i] word j <- r[j] word i. */
static inline void transpose8(__m256i *r) {
    __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

static void unpack_strip(const qtype_info *info, const uint8_t *const *rows, int64_t k0, int n, strip_chunk *w) {
    for (int r = 0; r < STRIP; r++) {
        if (rows[r]) {
            unpack_out out = {w->rows[r], w->s + r, w->o + 2 * r, w->D + r, w->Dm + r, STRIP};
            info->unpack(rows[r], k0, n, &out);
        } else {
            memset(w->rows[r], 0, (size_t)n);
            for (int g = 0; g < n / 16; g++) w->s[g * STRIP + r] = 0;
            for (int b = 0; b < n / QA; b++) {
                w->D[b * STRIP + r] = w->Dm[b * STRIP + r] = 0.0f;
                w->o[b * 2 * STRIP + 2 * r] = w->o[b * 2 * STRIP + 2 * r + 1] = 0;
            }
        }
    }
    for (int b = 0; b < n / QA; b++) {
        __m256i t[STRIP];
        for (int r = 0; r < STRIP; r++) t[r] = _mm256_loadu_si256((const __m256i *)(w->rows[r] + QA * b));
        transpose8(t);
        for (int j = 0; j < 8; j++) _mm256_storeu_si256((__m256i *)(w->v + (8 * b + j) * 32), t[j]);
    }
}

/* C columns of x against the strip for one chunk. B: values per activation scale; STEPS: 4-value steps summed in
   int16 before the scales are applied; OFFSET: whether the type has Dm o terms. */
#define DEFINE_KERNEL(NAME, B, STEPS, SIGNED, OFFSET, C)                                                    \
    static void NAME(const strip_chunk *w, int n, const act_q8 *a, int64_t k0, int64_t c0, float *acc) {    \
        const int64_t k = a->k;                                                                             \
        const int8_t *qp[C];                                                                                \
        const float *dp[C];                                                                                 \
        const int16_t *gp[C];                                                                               \
        __m256 f[C];                                                                                        \
        for (int c = 0; c < C; c++) {                                                                       \
            qp[c] = a->q + (c0 + c) * k + k0;                                                               \
            dp[c] = a->d + (c0 + c) * (k / B) + k0 / B;                                                     \
            gp[c] = a->g + (c0 + c) * (k / 16) + k0 / 16;                                                   \
            f[c] = _mm256_loadu_ps(acc + (c0 + c) * STRIP);                                                 \
        }                                                                                                   \
        for (int ib = 0; ib < n / B; ib++) {                                                                \
            __m256i t[C], os[C];                                                                            \
            for (int c = 0; c < C; c++) t[c] = os[c] = _mm256_setzero_si256();                              \
            for (int j0 = ib * (B / 4); j0 < (ib + 1) * (B / 4); j0 += STEPS) {                             \
                __m256i h[C];                                                                               \
                for (int st = 0; st < STEPS; st++) {                                                        \
                    const int j = j0 + st;                                                                  \
                    __m256i v = _mm256_loadu_si256((const __m256i *)(w->v + 32 * j));                       \
                    __m256i va = SIGNED ? _mm256_abs_epi8(v) : v;                                           \
                    for (int c = 0; c < C; c++) {                                                           \
                        int32_t x4;                                                                         \
                        memcpy(&x4, qp[c] + 4 * j, 4);                                                      \
                        __m256i x = _mm256_set1_epi32(x4);                                                  \
                        __m256i p = _mm256_maddubs_epi16(va, SIGNED ? _mm256_sign_epi8(x, v) : x);          \
                        h[c] = st ? _mm256_add_epi16(h[c], p) : p;                                          \
                    }                                                                                       \
                }                                                                                           \
                __m256i sc = _mm256_loadu_si256((const __m256i *)(w->s + (j0 / 4) * STRIP));                \
                for (int c = 0; c < C; c++) t[c] = _mm256_add_epi32(t[c], _mm256_madd_epi16(h[c], sc));     \
            }                                                                                               \
            const int b32 = ib * (B / QA);                                                                  \
            if (OFFSET) {                                                                                   \
                for (int gp2 = ib * (B / 32); gp2 < (ib + 1) * (B / 32); gp2++) {                           \
                    __m256i om = _mm256_loadu_si256((const __m256i *)(w->o + gp2 * 2 * STRIP));             \
                    for (int c = 0; c < C; c++) {                                                           \
                        int32_t g2;                                                                         \
                        memcpy(&g2, gp[c] + 2 * gp2, 4);                                                    \
                        os[c] = _mm256_add_epi32(os[c], _mm256_madd_epi16(om, _mm256_set1_epi32(g2)));      \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            __m256 D = _mm256_loadu_ps(w->D + b32 * STRIP), Dm = _mm256_loadu_ps(w->Dm + b32 * STRIP);      \
            for (int c = 0; c < C; c++) {                                                                   \
                __m256 d = _mm256_set1_ps(dp[c][ib]);                                                       \
                f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[c]), _mm256_mul_ps(D, d), f[c]);                \
                if (OFFSET) f[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(os[c]), _mm256_mul_ps(Dm, d), f[c]);  \
            }                                                                                               \
        }                                                                                                   \
        for (int c = 0; c < C; c++) _mm256_storeu_ps(acc + (c0 + c) * STRIP, f[c]);                         \
    }

typedef void (*kernel_fn)(const strip_chunk *, int, const act_q8 *, int64_t, int64_t, float *);

#define KERNEL_PAIR(TAG, B, STEPS, SIGNED, OFFSET)                                                          \
    DEFINE_KERNEL(k2_##TAG, B, STEPS, SIGNED, OFFSET, 2)                                                    \
    DEFINE_KERNEL(k1_##TAG, B, STEPS, SIGNED, OFFSET, 1)

/* Every combination a type has (unpack_impl.h's table): signed types have no offsets, unsigned ones do. */
KERNEL_PAIR(u32_8, 32, 8, 0, 1)
KERNEL_PAIR(u32_4, 32, 4, 0, 1)
KERNEL_PAIR(s32_1, 32, 1, 1, 0)
KERNEL_PAIR(u256_8, 256, 8, 0, 1)
KERNEL_PAIR(u256_4, 256, 4, 0, 1)
KERNEL_PAIR(u256_2, 256, 2, 0, 1)
KERNEL_PAIR(s256_1, 256, 1, 1, 0)

/* {two columns, one column} for a type's block, steps and signedness; NULL where no type needs it. */
static const kernel_fn *kernels_for(const qtype_info *info) {
    static const kernel_fn u32_8[2] = {k2_u32_8, k1_u32_8}, u32_4[2] = {k2_u32_4, k1_u32_4};
    static const kernel_fn s32_1[2] = {k2_s32_1, k1_s32_1}, u256_8[2] = {k2_u256_8, k1_u256_8};
    static const kernel_fn u256_4[2] = {k2_u256_4, k1_u256_4}, u256_2[2] = {k2_u256_2, k1_u256_2};
    static const kernel_fn s256_1[2] = {k2_s256_1, k1_s256_1};
    if (info->is_signed) return info->block == 256 ? s256_1 : s32_1;
    if (info->block == 256) return info->steps == 8 ? u256_8 : info->steps == 4 ? u256_4 : u256_2;
    return info->steps == 8 ? u32_8 : u32_4;
}

static void strip_avx2(const qtype_info *info, const uint8_t *const *rows, int64_t k0, int n, const act_q8 *a,
                       float *acc, void *work) {
    strip_chunk *w = work;
    unpack_strip(info, rows, k0, n, w);
    const kernel_fn *k = kernels_for(info);
    int64_t c = 0;
    for (; c + 2 <= a->m; c += 2) k[0](w, n, a, k0, c, acc);
    if (c < a->m) k[1](w, n, a, k0, c, acc);
}

const isa_kernels kernels_avx2 = {strip_avx2, quantize_avx2, lookup_avx2, gemv_lookup_avx2, x8_kernel_avx2, "avx2"};
/* The same, with the interleaved layouts' kernels using vpdpbusd (chosen only where the CPU has AVX-512 VNNI). */
const isa_kernels kernels_vnni = {strip_avx2, quantize_avx2, lookup_avx2, gemv_lookup_avx2, x8_kernel_vnni,
                                  "avx512vnni"};
#endif
