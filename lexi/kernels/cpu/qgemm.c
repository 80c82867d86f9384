/* The quantized matmul driver: quantize x, then strips of weight rows on every thread (lexi_cpu.h has the math).

   Several weights that read the same x (q/k/v, gate/up) run as one job: x is quantized once, their rows are
   strips of one task list, and each writes its own columns of y. The workspace (quantized x, each thread's
   unpacked strip and accumulators) belongs to the caller's object and grows to the largest call.
*/
#include <stdlib.h>
#include <string.h>

#include "qgemm.h"
#include "repack.h"

#define TASKS_PER_THREAD 16

typedef struct {
    const isa_kernels *isa;
    const weight_desc *w;
    const qtype_info *info[QGEMM_MAX_WEIGHTS];
    int64_t first_strip[QGEMM_MAX_WEIGHTS + 1];
    int nw;
    int64_t k, m, terms; /* m: rows of x; the activations hold terms x m rows */
    act_q8 a[2]; /* x per 32 values, per 256 values */
    int need[2];
    float *y;
    int64_t ldy;
    int64_t strips_per_task, total_strips;
    thread_scratch *scratch;
    const float *x;
    int64_t ldx, rows_per_task;
} gemm_job;

int workspace_grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *p = NULL;
    if (posix_memalign(&p, 64, need) != 0) return -1;
    free(*buf);
    *buf = p;
    *cap = need;
    return 0;
}

int workspace_reserve(workspace *ws, int threads, int64_t m, int64_t k) {
    if (threads > ws->threads) {
        thread_scratch *t = realloc(ws->scratch, sizeof(thread_scratch) * (size_t)threads);
        if (!t) return -1;
        memset(t + ws->threads, 0, sizeof(thread_scratch) * (size_t)(threads - ws->threads));
        ws->scratch = t;
        ws->threads = threads;
    }
    for (int i = 0; i < 2; i++) {
        act_buffers *b = ws->act + i;
        if (workspace_grow((void **)&b->q, &b->q_cap, (size_t)(m * k)) ||
            workspace_grow((void **)&b->d, &b->d_cap, sizeof(float) * (size_t)(m * k / QA)) ||
            workspace_grow((void **)&b->g, &b->g_cap, sizeof(int16_t) * (size_t)(m * k / 16)))
            return -1;
    }
    for (int t = 0; t < threads; t++) {
        thread_scratch *s = ws->scratch + t;
        if (workspace_grow(&s->work, &s->work_cap, STRIP_WORK) ||
            workspace_grow((void **)&s->acc, &s->acc_cap, sizeof(float) * STRIP * (size_t)m))
            return -1;
    }
    return 0;
}

void workspace_free(workspace *ws) {
    for (int t = 0; t < ws->threads; t++) {
        free(ws->scratch[t].work);
        free(ws->scratch[t].acc);
    }
    free(ws->scratch);
    free(ws->moe_f);
    free(ws->moe_i);
    free(ws->dec_f);
    for (int i = 0; i < 2; i++) {
        free(ws->act[i].q);
        free(ws->act[i].d);
        free(ws->act[i].g);
    }
    memset(ws, 0, sizeof(*ws));
}

static void quantize_task(void *ctx, int task, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, rows = j->m - r0 < j->rows_per_task ? j->m - r0 : j->rows_per_task;
    for (int i = 0; i < 2; i++)
        if (j->need[i]) j->isa->quantize(j->x, j->ldx, r0, rows, j->a + i, j->terms == 2 ? j->m : -1);
}

static void run_file_rows(const isa_kernels *isa, thread_scratch *s, const weight_desc *w, const qtype_info *info,
                          const act_q8 *a, int64_t r0, int rows) {
    const int64_t m = a->m, k = a->k; /* every row of the activations, both terms */
    const uint8_t *row[STRIP];
    for (int r = 0; r < STRIP; r++) row[r] = r < rows ? w->data + (r0 + r) * w->row_bytes : NULL;
    gemv_fn gemv = m <= GEMV_MAX_M ? isa->gemv(w->type) : NULL;
    if (gemv) {
        for (int half = 0; half < STRIP; half += 4) {
            if (half >= rows) break;
            const uint8_t *four[4];
            for (int r = 0; r < 4; r++) four[r] = row[half + r] ? row[half + r] : row[0]; /* padding: discarded */
            gemv(four, k, a, s->acc + half, STRIP);
        }
    } else {
        memset(s->acc, 0, sizeof(float) * STRIP * (size_t)m);
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            int n = (int)(k - k0 < KC ? k - k0 : KC);
            isa->strip(info, row, k0, n, a, s->acc, s->work);
        }
    }
}

void qgemm_strip(const isa_kernels *isa, thread_scratch *s, const weight_desc *w, const qtype_info *info,
                 const act_q8 *a, int terms, int64_t r0, float *y, int64_t ldy) {
    int rows = (int)(w->n - r0 < STRIP ? w->n - r0 : STRIP);
    const int64_t m = a->m / terms;
    if (w->layout == 1) {
        isa->x8(w->type)(w->data + (r0 / 8) * w->row_bytes, a->k, a, s->acc);
    } else {
        run_file_rows(isa, s, w, info, a, r0, rows);
    }
    for (int64_t c = 0; c < m; c++) {
        float *out = y + c * ldy + w->col + r0;
        const float *first = s->acc + c * STRIP, *second = s->acc + (m + c) * STRIP;
        if (terms == 2) {
            for (int r = 0; r < rows; r++) out[r] = first[r] + second[r];
        } else {
            for (int r = 0; r < rows; r++) out[r] = first[r];
        }
    }
}

static void run_strip(gemm_job *j, thread_scratch *s, int64_t strip) {
    int wi = 0;
    while (strip >= j->first_strip[wi + 1]) wi++;
    const qtype_info *info = j->info[wi];
    int64_t r0 = (strip - j->first_strip[wi]) * STRIP;
    qgemm_strip(j->isa, s, j->w + wi, info, j->a + (info->block == 256), (int)j->terms, r0, j->y, j->ldy);
}

static void gemm_task(void *ctx, int task, int thread) {
    gemm_job *j = ctx;
    int64_t first = task * j->strips_per_task, last = first + j->strips_per_task;
    if (last > j->total_strips) last = j->total_strips;
    for (int64_t strip = first; strip < last; strip++) run_strip(j, j->scratch + thread, strip);
}

const char *qgemm_check(const isa_kernels *isa, const weight_desc *w, int nw, int64_t k) {
    if (nw < 1 || nw > QGEMM_MAX_WEIGHTS) return "between 1 and 4 weights per call";
    if (k <= 0 || k % QA) return "k must be a positive multiple of 32";
    for (int i = 0; i < nw; i++) {
        const qtype_info *info = isa->lookup(w[i].type);
        if (!info) return "a weight's type has no CPU kernel";
        if (k % info->block) return "k is not a whole number of the weight type's blocks";
        if (w[i].layout == 1) {
            const x8_layout *l = x8_lookup(w[i].type);
            if (!l || !isa->x8(w[i].type)) return "the interleaved layout has no kernel on this CPU";
            if (w[i].row_bytes != k / l->block * l->bytes) return "row_bytes does not match an interleaved group";
        } else if (w[i].layout != 0) {
            return "layout must be 0 (file rows) or 1 (interleaved)";
        } else if (w[i].row_bytes != k / info->block * info->bytes) {
            return "row_bytes does not match the type and k";
        }
        if (w[i].n <= 0 || w[i].col < 0) return "a weight needs n > 0 and col >= 0";
    }
    return NULL;
}

int qgemm(pool *p, workspace *ws, const isa_kernels *isa, const float *x, int64_t m, int64_t k, int64_t ldx,
          const weight_desc *w, int nw, float *y, int64_t ldy, int terms) {
    int threads = pool_threads(p);
    if (workspace_reserve(ws, threads, terms * m, k)) return -1;
    gemm_job j = {.isa = isa, .w = w, .nw = nw, .k = k, .m = m, .terms = terms, .y = y, .ldy = ldy,
                  .scratch = ws->scratch, .x = x, .ldx = ldx};
    for (int i = 0; i < 2; i++) {
        act_buffers *b = ws->act + i;
        j.a[i] = (act_q8){.q = b->q, .d = b->d, .g = b->g, .m = terms * m, .k = k, .block = i ? 256 : QA};
    }
    j.first_strip[0] = 0;
    for (int i = 0; i < nw; i++) {
        j.info[i] = isa->lookup(w[i].type);
        j.need[j.info[i]->block == 256] = 1;
        j.first_strip[i + 1] = j.first_strip[i] + (w[i].n + STRIP - 1) / STRIP;
    }
    for (int i = nw + 1; i <= QGEMM_MAX_WEIGHTS; i++) j.first_strip[i] = j.first_strip[nw];
    j.rows_per_task = (m + threads - 1) / threads;
    if (m <= 4 || threads == 1) {
        for (int i = 0; i < 2; i++)
            if (j.need[i]) isa->quantize(x, ldx, 0, m, j.a + i, terms == 2 ? m : -1);
    } else {
        pool_run(p, quantize_task, &j, (int)((m + j.rows_per_task - 1) / j.rows_per_task));
    }
    j.total_strips = j.first_strip[nw];
    int64_t tasks = (int64_t)threads * TASKS_PER_THREAD;
    if (tasks > j.total_strips) tasks = j.total_strips;
    j.strips_per_task = (j.total_strips + tasks - 1) / tasks;
    pool_run(p, gemm_task, &j, (int)((j.total_strips + j.strips_per_task - 1) / j.strips_per_task));
    return 0;
}
