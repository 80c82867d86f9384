/* The mixture-of-experts FFN driver's interface (moe.c), used by the Python binding (module.c). */
#ifndef LEXI_MOE_H
#define LEXI_MOE_H

#include "qgemm.h"

enum { MOE_SILU = 0, MOE_SWIGLU_OAI = 1 };

/* y_t = sum_s route[t, s] * (down_e(act(gate_e x_t + bg_e, up_e x_t + bu_e)) + bd_e), e = ids[t, s]. */
typedef struct {
    const float *x; /* t x d */
    int64_t t, d, f;
    int k;
    const int32_t *ids;  /* t x k expert ids */
    const float *route;  /* t x k router weights */
    const int64_t *table; /* 3 x e x 6: gate's, up's, down's (type, address, row_bytes, n, col, layout) per expert */
    int e;
    const float *gate_bias, *up_bias, *down_bias; /* e x f, e x f, e x d float32, or NULL */
    int act;
    float alpha, limit; /* MOE_SWIGLU_OAI's */
    float *y; /* t x d */
    int terms;
} moe_args;

/* NULL when the call can run, else why not (an expert id out of range, a weight of the wrong shape or type). */
const char *moe_check(const isa_kernels *isa, const moe_args *a);

/* 0, or -1 when out of memory. */
int moe_ffn(pool *p, workspace *ws, const isa_kernels *isa, const moe_args *a);

#endif
