/* The decode step's attention over the paged KV cache, one layer a call (decode.c).

   Every query vector (a row's head) takes float32 scores over its row's keys (every position up to its own,
   within the layer's window), times the scale, a softmax (gpt-oss's sink as one more column) and the weighted sum
   of values, rounded to the cache's dtype.

   With attn_avx2.c's kernels the work is cut into pieces of up to ATTN_PIECE_MAX vectors of one sequence and KV
   head, across its rows: a speculative step's draft rows see nearly the same keys, so a piece reads and widens
   each key once for all its vectors (SmolLM2 at 2,000 keys: attention was half of a 9-row step, every row reading
   the whole cache on its own). A piece's keys are the union of its rows'; a row's weights outside its own keys are
   exactly zero, and each vector's sums run in the same order whatever piece it shares, so a row's result does not
   depend on the rows beside it (speculation's greedy output equals one token a step, bit for bit).
   The portable loops keep one task per (row, KV head).
*/
#include <math.h>
#include <string.h>

#include "attn.h"
#include "decode_attn.h"
#include "decode_math.h"

typedef struct {
    const attn_plan *plan;
    const dec_layer *l;
    const float *qkv; /* t x nq: q rounded to the cache's dtype */
    int64_t nq;
    const void *k_cache, *v_cache;
    float *att; /* t x H*hd */
} attn_job;

static int64_t group_of(const dec_model *m) {
    return m->n_heads / m->n_kv_heads;
}

/* The keys a row at `position` attends to: [lo, n). */
static void key_range(const dec_layer *l, int64_t position, int64_t *lo, int64_t *n) {
    *n = position + 1;
    *lo = l->window > 0 && *n > l->window ? *n - l->window : 0;
}

/* len scores -> softmax weights, gpt-oss's sink (NULL: none) joining the sum. */
static void softmax_span(float *w, int64_t len, const float *sink) {
    float top = w[0];
    for (int64_t i = 1; i < len; i++) top = w[i] > top ? w[i] : top;
    if (sink && *sink > top) top = *sink;
    float sum = 0.0f;
    for (int64_t i = 0; i < len; i++) sum += (w[i] = expf(w[i] - top));
    if (sink) sum += expf(*sink - top);
    for (int64_t i = 0; i < len; i++) w[i] /= sum;
}

static const float *sink_of(const attn_job *j, int64_t head) {
    const float *sinks = F32(j->l->sinks);
    return sinks ? sinks + head : NULL;
}

int64_t attn_scratch_floats(const dec_model *m, int64_t top_keys) {
    const int64_t g_n = group_of(m), width = g_n > ATTN_PIECE_MAX ? g_n : ATTN_PIECE_MAX;
    return width * top_keys + (2 * ATTN_PIECE_MAX + 1) * m->head_dim + 16;
}

int64_t attn_max_pieces(const dec_model *m, int64_t t) {
    return t * m->n_heads; /* a piece holds at least one vector */
}

int attn_pieces(const dec_model *m, const dec_step *s, int threads, attn_piece *out) {
    const int64_t g_n = group_of(m), lanes = s->s * m->n_kv_heads;
    /* a sequence's rows in at least two pieces a thread where (sequence, KV head) pairs are few, so no thread
       waits on another's (one row alone keeps its G heads together: split, its keys were read twice for nothing) */
    const int64_t spread = (2 * threads + lanes - 1) / lanes;
    int n = 0;
    for (int64_t i = 0; i < s->s; i++) {
        const int64_t vectors = (s->query_start[i + 1] - s->query_start[i]) * g_n;
        int64_t cuts = (vectors + ATTN_PIECE_MAX - 1) / ATTN_PIECE_MAX;
        if (vectors > g_n && cuts < spread) cuts = spread < vectors ? spread : vectors;
        for (int64_t kvh = 0; kvh < m->n_kv_heads; kvh++)
            for (int64_t c = 0, first = 0; c < cuts; c++) {
                const int64_t count = vectors / cuts + (c < vectors % cuts);
                out[n++] = (attn_piece){(int32_t)i, (int32_t)kvh, (int32_t)first, (int32_t)count};
                first += count;
            }
    }
    return n;
}

#if defined(__x86_64__) || defined(__i386__)
/* Every cache line of n rows of hd bfloat16 values, `stride` elements apart. */
static void prefetch_run(const uint16_t *at, int64_t stride, int64_t n, int64_t hd) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < hd * 2; b += 64) __builtin_prefetch((const char *)(at + i * stride) + b, 0, 3);
}

/* A piece's vector v: its row, query head and keys [lo, n). */
typedef struct {
    int64_t row, head, lo, n;
} piece_vector;

/* One piece with attn_avx2.c's kernels, a run of keys per cache block: scores, softmax, values. */
static void piece_avx2(const attn_job *j, const attn_piece *pc, float *scratch) {
    const dec_model *m = j->plan->m;
    const dec_step *s = j->plan->s;
    const int64_t hd = m->head_dim, g_n = group_of(m), bs = s->block_size, row_elems = m->n_kv_heads * hd;
    const int64_t qn = pc->count, kvh = pc->kvh;
    const int32_t *table = s->block_tables + (int64_t)pc->seq * s->bt_stride;
    piece_vector vec[ATTN_PIECE_MAX];
    int64_t lo_u = INT64_MAX, hi_u = 0; /* the union of the vectors' keys */
    for (int64_t v = 0; v < qn; v++) {
        piece_vector *pv = vec + v;
        pv->row = s->query_start[pc->seq] + (pc->first + v) / g_n;
        pv->head = kvh * g_n + (pc->first + v) % g_n;
        key_range(j->l, s->positions[pv->row], &pv->lo, &pv->n);
        lo_u = pv->lo < lo_u ? pv->lo : lo_u;
        hi_u = pv->n > hi_u ? pv->n : hi_u;
    }
    const int64_t span = hi_u - lo_u;
    float *sc = scratch, *q = sc + qn * span, *out = q + qn * hd; /* qn x span scores, qn x hd queries, outputs */
    for (int64_t v = 0; v < qn; v++)
        memcpy(q + v * hd, j->qkv + vec[v].row * j->nq + vec[v].head * hd, sizeof(float) * (size_t)hd);
    memset(out, 0, sizeof(float) * (size_t)(qn * hd));
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t key = lo_u; key < hi_u;) {
            const int64_t run = bs - key % bs < hi_u - key ? bs - key % bs : hi_u - key;
            const int64_t at = ((int64_t)table[key / bs] * bs + key % bs) * row_elems + kvh * hd;
            if (key + run < hi_u) /* the next block's keys (or values) on their way while this block's are used */
                prefetch_run((const uint16_t *)(pass ? j->v_cache : j->k_cache) +
                                 (int64_t)table[(key + run) / bs] * bs * row_elems + kvh * hd,
                             row_elems, bs < hi_u - key - run ? bs : hi_u - key - run, hd);
            if (pass == 0)
                attn_scores_avx2(q, qn, hd, (const uint16_t *)j->k_cache + at, row_elems, run, (float)m->scale,
                                 sc + (key - lo_u), span);
            else /* eight vectors at a time (the kernel's register tiles), the run's values still in L1 */
                for (int64_t v0 = 0; v0 < qn; v0 += 8)
                    attn_values_avx2(sc + v0 * span + (key - lo_u), span, qn - v0 < 8 ? qn - v0 : 8, hd,
                                     (const uint16_t *)j->v_cache + at, row_elems, run, out + v0 * hd);
            key += run;
        }
        if (pass == 1) break;
        for (int64_t v = 0; v < qn; v++) { /* each vector's own keys; zero weight on the others */
            const piece_vector *pv = vec + v;
            float *w = sc + v * span;
            attn_softmax_avx2(w + (pv->lo - lo_u), pv->n - pv->lo, sink_of(j, pv->head));
            memset(w, 0, sizeof(float) * (size_t)(pv->lo - lo_u));
            memset(w + (pv->n - lo_u), 0, sizeof(float) * (size_t)(hi_u - pv->n));
        }
    }
    for (int64_t v = 0; v < qn; v++) {
        float *dst = j->att + vec[v].row * m->n_heads * hd + vec[v].head * hd;
        for (int64_t e = 0; e < hd; e++) dst[e] = round_to_cache(out[v * hd + e], (int)m->cache_type);
    }
}

static void piece_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    piece_avx2(j, j->plan->pieces + task, j->plan->scratch + (int64_t)thread * j->plan->scratch_floats);
}
#endif

HOT static void widen_bf16(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

HOT static void axpy(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* The portable loops, one (row, KV head) a task: a key (or value) at a time, widened to float32 first where the
   cache is bfloat16. */
static void row_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    const dec_model *m = j->plan->m;
    const dec_step *s = j->plan->s;
    const int64_t hd = m->head_dim, g_n = group_of(m), bs = s->block_size, row_elems = m->n_kv_heads * hd;
    const int64_t row = task / m->n_kv_heads, kvh = task % m->n_kv_heads;
    int64_t lo, n;
    key_range(j->l, s->positions[row], &lo, &n);
    const int64_t len = n - lo;
    float *sc = j->plan->scratch + (int64_t)thread * j->plan->scratch_floats; /* g_n x len scores, hd floats */
    float *widened = sc + g_n * len, *out = j->att + row * m->n_heads * hd + kvh * g_n * hd;
    const int32_t *table = s->block_tables + (int64_t)j->plan->seq_of[row] * s->bt_stride;
    const float *q = j->qkv + row * j->nq + kvh * g_n * hd;
    const int bf16 = m->cache_type == DEC_CACHE_BF16;
    memset(out, 0, sizeof(float) * (size_t)(g_n * hd));
    for (int pass = 0; pass < 2; pass++) {
        const void *cache = pass ? j->v_cache : j->k_cache;
        for (int64_t i = 0; i < len; i++) {
            const int64_t key = lo + i;
            const int64_t at = ((int64_t)table[key / bs] * bs + key % bs) * row_elems + kvh * hd;
            const float *r = (const float *)cache + at;
            if (bf16) {
                widen_bf16((const uint16_t *)cache + at, widened, hd);
                r = widened;
            }
            for (int64_t g = 0; g < g_n; g++) {
                if (pass == 0)
                    sc[g * len + i] = dot_f32(q + g * hd, r, hd) * (float)m->scale;
                else
                    axpy(sc[g * len + i], r, out + g * hd, hd);
            }
        }
        for (int64_t g = 0; pass == 0 && g < g_n; g++) softmax_span(sc + g * len, len, sink_of(j, kvh * g_n + g));
    }
    for (int64_t e = 0; e < g_n * hd; e++) out[e] = round_to_cache(out[e], (int)m->cache_type);
}

void decode_attention(pool *p, const attn_plan *plan, const dec_layer *l, const float *qkv, int64_t nq,
                      const void *k_cache, const void *v_cache, float *att) {
    const attn_job j = {plan, l, qkv, nq, k_cache, v_cache, att};
#if defined(__x86_64__) || defined(__i386__)
    if (plan->avx2) {
        pool_run(p, piece_task, (void *)&j, plan->n_pieces);
        return;
    }
#endif
    pool_run(p, row_task, (void *)&j, (int)(plan->s->t * plan->m->n_kv_heads));
}
