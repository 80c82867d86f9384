/* The float32 dot product decode.c (norms, the router) and decode_attn.c (the portable scores) share. Its own
   file, so neither of them calls into the other. */
#include "decode_math.h"

/* Eight partial sums, added pairwise at the end: the shape gcc vectorizes without reassociating a sum. */
HOT float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

