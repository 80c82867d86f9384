/* The mixture-of-experts FFN in one call: every chosen expert's gate, up and down over qgemm.c's strips.

   Why in C: from Python a decode step paid two kernel calls and half a dozen torch ops per chosen expert and layer
   (qwen3moe: 8 experts x 48 layers), and the step was bound by that, not by reading the experts' weights. Here:
     1. the (token, slot) assignments are sorted by expert, stably; each used expert gets a run of rows, and the x
        row of each of its assignments is quantized into that run (both terms, each run its own act_q8);
     2. one pool job runs every used expert's gate and up strips: h (N x 2F), row j = assignment j in sorted order;
     3. one pool job over rows: the biases, act(g, u) into h's first F columns, quantized into the run again;
     4. one pool job runs every used expert's down strips: o (N x D);
     5. one pool job over tokens: y_t = sum over slots, in slot order, of route[t, s] * (o + bd).
   Each row's products are what qgemm computes for it (integer sums per row), so a row's result does not depend
   on which other rows share its experts.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

#define TASKS_PER_THREAD 16

typedef struct {
    int64_t start, count; /* rows [start, start + count) of the sorted assignments */
    weight_desc w[3];     /* gate (col 0 of h), up (col F of h), down */
} moe_group;

typedef struct {
    const isa_kernels *isa;
    const moe_args *a;
    moe_group *groups;
    int ngroups;
    int64_t *order, *pos, *group_of; /* sorted row -> assignment, assignment -> sorted row, sorted row -> group */
    const qtype_info *info[3];
    act_buffers *act;
    int64_t n, kdim; /* assignments; the K of the phase's quantized activations (D, then F) */
    int need[2];
    float *h, *o;
    thread_scratch *scratch;
    int phase; /* 0: gate and up; 1: down */
    int64_t strips_per_group, strips_per_task, total_strips, rows_per_task;
} moe_job;

/* Group g's rows of the phase's activations, both terms, quantized per `block` (32 or 256). */
static act_q8 run_view(const moe_job *j, int g, int which) {
    const act_buffers *b = j->act + which;
    const int block = which ? 256 : QA, terms = j->a->terms;
    const int64_t k = j->kdim, r = terms * j->groups[g].start;
    return (act_q8){b->q + r * k, b->d + r * (k / block), b->g + r * (k / 16), terms * j->groups[g].count, k, block};
}

static void quantize_row(const moe_job *j, int64_t row, const float *x) {
    const int g = (int)j->group_of[row];
    const int64_t i = row - j->groups[g].start, k = j->kdim;
    for (int which = 0; which < 2; which++) {
        if (!j->need[which]) continue;
        act_q8 v = run_view(j, g, which);
        v.q += i * k;
        v.d += i * (k / v.block);
        v.g += i * (k / 16);
        j->isa->quantize(x, k, 0, 1, &v, j->a->terms == 2 ? j->groups[g].count : -1);
    }
}

static void quantize_x_task(void *ctx, int task, int thread) {
    (void)thread;
    moe_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task < j->n ? r0 + j->rows_per_task : j->n;
    for (int64_t row = r0; row < r1; row++) quantize_row(j, row, j->a->x + j->order[row] / j->a->k * j->a->d);
}

static float activate(const moe_args *a, float g, float u) {
    if (a->act == MOE_SILU) return g / (1.0f + expf(-g)) * u;
    g = g < a->limit ? g : a->limit;
    u = u < -a->limit ? -a->limit : (u > a->limit ? a->limit : u);
    return g / (1.0f + expf(-a->alpha * g)) * (u + 1.0f);
}

static void activation_task(void *ctx, int task, int thread) {
    (void)thread;
    moe_job *j = ctx;
    const moe_args *a = j->a;
    const int64_t f = a->f;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task < j->n ? r0 + j->rows_per_task : j->n;
    for (int64_t row = r0; row < r1; row++) {
        const int e = a->ids[j->order[row]];
        float *g = j->h + row * 2 * f, *u = g + f;
        const float *bg = a->gate_bias ? a->gate_bias + e * f : NULL, *bu = a->up_bias ? a->up_bias + e * f : NULL;
        for (int64_t c = 0; c < f; c++) g[c] = activate(a, bg ? g[c] + bg[c] : g[c], bu ? u[c] + bu[c] : u[c]);
        quantize_row(j, row, g);
    }
}

static void strip_task(void *ctx, int task, int thread) {
    moe_job *j = ctx;
    const moe_args *a = j->a;
    int64_t first = task * j->strips_per_task, last = first + j->strips_per_task;
    if (last > j->total_strips) last = j->total_strips;
    for (int64_t strip = first; strip < last; strip++) {
        const int g = (int)(strip / j->strips_per_group);
        int64_t s = strip % j->strips_per_group;
        const moe_group *grp = j->groups + g;
        int which;
        float *y;
        int64_t ldy;
        if (j->phase == 0) {
            const int64_t half = (a->f + STRIP - 1) / STRIP;
            which = s >= half;
            s -= which * half;
            y = j->h + grp->start * 2 * a->f;
            ldy = 2 * a->f;
        } else {
            which = 2;
            y = j->o + grp->start * a->d;
            ldy = a->d;
        }
        const qtype_info *info = j->info[which];
        act_q8 v = run_view(j, g, info->block == 256);
        qgemm_strip(j->isa, j->scratch + thread, grp->w + which, info, &v, a->terms, s * STRIP, y, ldy);
    }
}

static void combine_task(void *ctx, int task, int thread) {
    (void)thread;
    moe_job *j = ctx;
    const moe_args *a = j->a;
    const int64_t d = a->d;
    float *y = a->y + task * d;
    for (int s = 0; s < a->k; s++) {
        const int64_t as = (int64_t)task * a->k + s;
        const float w = a->route[as], *o = j->o + j->pos[as] * d;
        const float *bd = a->down_bias ? a->down_bias + (int64_t)a->ids[as] * d : NULL;
        for (int64_t c = 0; c < d; c++) {
            float v = (bd ? o[c] + bd[c] : o[c]) * w;
            y[c] = s ? y[c] + v : v;
        }
    }
}

static weight_desc table_desc(const moe_args *a, int which, int e) {
    const int64_t *t = a->table + ((int64_t)which * a->e + e) * 6;
    return (weight_desc){(int)t[0], (const uint8_t *)(uintptr_t)t[1], t[2], t[3], which == 1 ? a->f : 0, (int)t[5]};
}

static const char *check_expert(const isa_kernels *isa, const moe_args *a, int e) {
    weight_desc w[3] = {table_desc(a, 0, e), table_desc(a, 1, e), table_desc(a, 2, e)};
    if (w[0].n != a->f || w[1].n != a->f || w[2].n != a->d) return "an expert's weight has the wrong rows";
    for (int i = 0; i < 3; i++)
        if (w[i].type != table_desc(a, i, 0).type) return "every expert of a projection must have the same type";
    const char *problem = qgemm_check(isa, w, 2, a->d);
    return problem ? problem : qgemm_check(isa, w + 2, 1, a->f);
}

const char *moe_check(const isa_kernels *isa, const moe_args *a) {
    if (a->t < 1 || a->k < 1 || a->e < 1 || a->d < 1 || a->f < 1) return "need t, k, e, d and f >= 1";
    if (a->k > a->e) return "k must not exceed the number of experts";
    if (a->terms != 1 && a->terms != 2) return "terms must be 1 or 2";
    if (a->act != MOE_SILU && a->act != MOE_SWIGLU_OAI) return "act must be 0 (silu) or 1 (swiglu_oai)";
    const int64_t n = a->t * a->k;
    for (int64_t i = 0; i < n; i++)
        if (a->ids[i] < 0 || a->ids[i] >= a->e) return "an expert id is out of range";
    /* the experts this call reads (expert 0 too: the others' types are held to its), or all when fewer checks */
    const char *problem = check_expert(isa, a, 0);
    for (int64_t i = 0; !problem && i < (n < a->e ? n : a->e); i++)
        problem = check_expert(isa, a, n < a->e ? a->ids[i] : (int)i);
    return problem;
}

int moe_ffn(pool *p, workspace *ws, const isa_kernels *isa, const moe_args *a) {
    const int threads = pool_threads(p);
    const int64_t n = a->t * a->k, kmax = a->d > a->f ? a->d : a->f;
    if (workspace_reserve(ws, threads, a->terms * n, kmax)) return -1;
    size_t floats = sizeof(float) * (size_t)(n * 2 * a->f + n * a->d);
    size_t ints = sizeof(int64_t) * (size_t)(3 * n + a->e + 1) + sizeof(moe_group) * (size_t)a->e;
    if (workspace_grow((void **)&ws->moe_f, &ws->moe_f_cap, floats) ||
        workspace_grow((void **)&ws->moe_i, &ws->moe_i_cap, ints))
        return -1;
    moe_job j = {.isa = isa, .a = a, .act = ws->act, .n = n, .scratch = ws->scratch};
    j.h = ws->moe_f;
    j.o = j.h + n * 2 * a->f;
    j.order = (int64_t *)ws->moe_i;
    j.pos = j.order + n;
    j.group_of = j.pos + n;
    int64_t *next = j.group_of + n; /* e + 1: each expert's next free row */
    j.groups = (moe_group *)(next + a->e + 1);
    for (int i = 0; i < 3; i++) j.info[i] = isa->lookup(table_desc(a, i, 0).type);

    /* counting sort of the assignments by expert, stable */
    memset(next, 0, sizeof(int64_t) * (size_t)(a->e + 1));
    for (int64_t i = 0; i < n; i++) next[a->ids[i] + 1]++;
    for (int e = 0; e < a->e; e++) {
        if (next[e + 1]) {
            moe_group *g = j.groups + j.ngroups++;
            g->start = next[e];
            g->count = next[e + 1];
            for (int w = 0; w < 3; w++) g->w[w] = table_desc(a, w, e);
        }
        next[e + 1] += next[e];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t row = next[a->ids[i]]++;
        j.order[row] = i;
        j.pos[i] = row;
    }
    for (int g = 0; g < j.ngroups; g++)
        for (int64_t r = 0; r < j.groups[g].count; r++) j.group_of[j.groups[g].start + r] = g;

    int64_t row_tasks = (int64_t)threads * 4 < n ? (int64_t)threads * 4 : n;
    j.rows_per_task = (n + row_tasks - 1) / row_tasks;
    const int row_jobs = (int)((n + j.rows_per_task - 1) / j.rows_per_task);
    for (int phase = 0; phase < 2; phase++) {
        j.phase = phase;
        j.kdim = phase ? a->f : a->d;
        memset(j.need, 0, sizeof(j.need));
        if (phase) {
            j.need[j.info[2]->block == 256] = 1;
            pool_run(p, activation_task, &j, row_jobs);
        } else {
            j.need[j.info[0]->block == 256] = j.need[j.info[1]->block == 256] = 1;
            pool_run(p, quantize_x_task, &j, row_jobs);
        }
        const int64_t rows = phase ? a->d : a->f;
        j.strips_per_group = (phase ? 1 : 2) * ((rows + STRIP - 1) / STRIP);
        j.total_strips = j.strips_per_group * j.ngroups;
        int64_t tasks = (int64_t)threads * TASKS_PER_THREAD;
        if (tasks > j.total_strips) tasks = j.total_strips;
        j.strips_per_task = (j.total_strips + tasks - 1) / tasks;
        pool_run(p, strip_task, &j, (int)((j.total_strips + j.strips_per_task - 1) / j.strips_per_task));
    }
    pool_run(p, combine_task, &j, (int)a->t);
    return 0;
}
