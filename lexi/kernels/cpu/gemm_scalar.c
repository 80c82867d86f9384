/* The portable kernels: plain C that any compiler builds, for CPUs without AVX2 and as the yardstick of the
   vector kernels. Lane for lane they compute what gemm_avx2.c computes (the same integer sums in the same eight
   float accumulators, fused multiply-adds in the same order), so the two agree bit for bit; tests check it. */
#include <math.h>
#include <string.h>

#include "lexi_cpu.h"

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                mant <<= 1;
                e++;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#define FP16(p) fp16_to_fp32((uint16_t)((p)[0] | ((p)[1] << 8)))
#define UNPACK_LOOKUP lookup_scalar
#include "unpack_impl.h"

/* One activation block: q, its scale and the int16 sums of every 16 values. */
static void quantize_block(const float *xb, int B, int8_t *q, float *d, int16_t *g) {
    float amax = 0.0f;
    for (int j = 0; j < B; j++) amax = fmaxf(amax, fabsf(xb[j]));
    float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    *d = scale;
    for (int h = 0; h < B / 16; h++) {
        int sum = 0;
        for (int j = 16 * h; j < 16 * h + 16; j++) {
            int v = (int)nearbyintf(xb[j] * inv);
            q[j] = (int8_t)v;
            sum += v;
        }
        g[h] = (int16_t)sum;
    }
}

static void quantize_scalar(const float *x, int64_t ldx, int64_t row0, int64_t rows, act_q8 *a, int64_t second) {
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
            for (int j = 0; j < B; j++) rest[j] = xr[B * b + j] - *d * (float)q[j];
            int64_t r2 = second + r;
            quantize_block(rest, B, a->q + r2 * k + B * b, a->d + r2 * (k / B) + b, a->g + r2 * (k / 16) + (B / 16) * b);
        }
    }
}

/* Each row's chunk in its own arrays (stride 1). */
typedef struct {
    uint8_t v[KC];
    int32_t s[KC / 16];
    int16_t o[KC / 16];
    float D[KC / QA], Dm[KC / QA];
} row_chunk;

_Static_assert(sizeof(row_chunk) * STRIP <= STRIP_WORK, "STRIP_WORK too small for the portable kernel");

static void strip_scalar(const qtype_info *info, const uint8_t *const *rows, int64_t k0, int n, const act_q8 *a,
                         float *acc, void *work) {
    row_chunk *u = work;
    const int64_t m = a->m, k = a->k;
    const int B = a->block;
    for (int r = 0; r < STRIP; r++) {
        if (rows[r]) {
            unpack_out out = {u[r].v, u[r].s, u[r].o, u[r].D, u[r].Dm, 1};
            info->unpack(rows[r], k0, n, &out);
        } else {
            memset(u + r, 0, sizeof(row_chunk));
        }
    }
    for (int r = 0; r < STRIP; r++) {
        const row_chunk *w = u + r;
        for (int64_t c = 0; c < m; c++) {
            const int8_t *q = a->q + c * k + k0;
            const float *d = a->d + c * (k / B) + k0 / B;
            float x = acc[c * STRIP + r];
            const int16_t *qs = a->g + c * (k / 16) + k0 / 16;
            for (int ib = 0; ib < n / B; ib++) {
                int32_t isum = 0, osum = 0;
                for (int g = ib * B / 16; g < (ib + 1) * B / 16; g++) {
                    int32_t gs = 0;
                    for (int j = 16 * g; j < 16 * g + 16; j++) {
                        gs += (info->is_signed ? (int)(int8_t)w->v[j] : (int)w->v[j]) * q[j];
                    }
                    isum += (int16_t)w->s[g] * gs;
                    osum += w->o[g] * qs[g];
                }
                const int b32 = ib * B / QA;
                x = fmaf((float)isum, w->D[b32] * d[ib], x);
                if (info->has_offset) x = fmaf((float)osum, w->Dm[b32] * d[ib], x);
            }
            acc[c * STRIP + r] = x;
        }
    }
}

static gemv_fn no_gemv(int type) {
    (void)type;
    return NULL;
}

static x8_kernel no_x8(int type) {
    (void)type;
    return NULL;
}

const isa_kernels kernels_scalar = {strip_scalar, quantize_scalar, lookup_scalar, no_gemv, no_x8, "scalar"};
