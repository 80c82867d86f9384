/* What decode.c and decode_attn.c share: bfloat16 rounding as torch does it, float32 dot products (decode_math.c),
   record access. */
#ifndef LEXI_DECODE_MATH_H
#define LEXI_DECODE_MATH_H

#include <stdint.h>
#include <string.h>

#include "decode_records.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

#define F32(addr) ((const float *)(uintptr_t)(addr))

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* torch's float -> bfloat16: round to nearest, ties to even; NaN stays a quiet NaN */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float round_to_cache(float f, int cache_type) {
    return cache_type == DEC_CACHE_BF16 ? bf16_to_f32(f32_to_bf16(f)) : f;
}

/* Eight partial sums, added pairwise at the end (decode_math.c). */
float dot_f32(const float *a, const float *b, int64_t n);

#endif
