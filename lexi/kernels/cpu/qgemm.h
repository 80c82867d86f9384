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
    float *moe_f; /* moe.c's rows of h and o */
    size_t moe_f_cap;
    void *moe_i; /* moe.c's sorted assignments and expert runs */
    size_t moe_i_cap;
    float *dec_f; /* decode.c's rows between a layer's matmuls */
    size_t dec_f_cap;
} workspace;

/* Grow *buf (64-byte aligned, contents dropped) to at least `need` bytes; 0, or -1 when out of memory. */
int workspace_grow(void **buf, size_t *cap, size_t need);

int workspace_reserve(workspace *ws, int threads, int64_t m, int64_t k);
void workspace_free(workspace *ws);

/* NULL when the weights can be multiplied by (m x k) inputs with these kernels, else why not. */
const char *qgemm_check(const isa_kernels *isa, const weight_desc *w, int nw, int64_t k);

/* y[c * ldy + w.col + n] = sum_j x[c * ldx + j] * W[n, j] for every weight, x as `terms` (1 or 2) int8 terms;
   0, or -1 when out of memory. */
int qgemm(pool *p, workspace *ws, const isa_kernels *isa, const float *x, int64_t m, int64_t k, int64_t ldx,
          const weight_desc *w, int nw, float *y, int64_t ldy, int terms);

/* One strip of STRIP rows of `w` (from row r0) against every row of `a` (terms x m rows: the first term's m rows,
   then the second's), written to y[c * ldy + w.col + r0 + r]; `a` is quantized per the weight type's block. */
void qgemm_strip(const isa_kernels *isa, thread_scratch *s, const weight_desc *w, const qtype_info *info,
                 const act_q8 *a, int terms, int64_t r0, float *y, int64_t ldy);

#endif
