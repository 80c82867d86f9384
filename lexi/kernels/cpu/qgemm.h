/* The quantized matmul driver's interface (qgemm.c), used by the Python binding (module.c). */
#ifndef LEXI_QGEMM_H
#define LEXI_QGEMM_H

#include "lexi_cpu.h"

#define QGEMM_MAX_WEIGHTS 4

typedef struct {
    void *work; /* the strip kernel's scratch, STRIP_WORK bytes */
    size_t work_cap;
    float *acc; /* m x STRIP */
    size_t acc_cap;
} thread_scratch;

typedef struct {
    int8_t *q;
    size_t q_cap;
    float *d;
    size_t d_cap;
    int16_t *g;
    size_t g_cap;
} act_buffers;

/* Buffers reused from call to call: x quantized per 32 and per 256 values, and each thread's scratch. */
typedef struct {
    act_buffers act[2];
    thread_scratch *scratch;
    int threads;
} workspace;

int workspace_reserve(workspace *ws, int threads, int64_t m, int64_t k);
void workspace_free(workspace *ws);

/* NULL when the weights can be multiplied by (m x k) inputs with these kernels, else why not. */
const char *qgemm_check(const isa_kernels *isa, const weight_desc *w, int nw, int64_t k);

/* y[c * ldy + w.col + n] = sum_j x[c * ldx + j] * W[n, j] for every weight, x as `terms` (1 or 2) int8 terms;
   0, or -1 when out of memory. */
int qgemm(pool *p, workspace *ws, const isa_kernels *isa, const float *x, int64_t m, int64_t k, int64_t ldx,
          const weight_desc *w, int nw, float *y, int64_t ldy, int terms);

#endif
