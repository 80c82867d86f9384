/* The decode step's gated FFN activation with AVX2 (act_avx2.c), used by decode.c. */
#ifndef LEXI_ACT_H
#define LEXI_ACT_H

#include "decode_records.h"

/* g[c] <- act(g[c]) * u[c] for c < f; act a DEC_ACT_* */
void act_gated_avx2(int act, float *g, const float *u, int64_t f);

#endif
