/* The decode step's attention over the paged KV cache (decode_attn.c), one layer a call from decode.c. */
#ifndef LEXI_DECODE_ATTN_H
#define LEXI_DECODE_ATTN_H

#include "decode_records.h"
#include "lexi_cpu.h"

/* Query vectors [first, first + count) of sequence `seq` against KV head `kvh`: vector v is head v % G of the
   sequence's row v / G (G = n_heads / n_kv_heads); count <= ATTN_PIECE_MAX. */
typedef struct {
    int32_t seq, kvh, first, count;
} attn_piece;

#define ATTN_PIECE_MAX 16 /* each piece reads its keys once: fewer, larger pieces read the cache fewer times */

/* What every layer of one step shares: the pieces (avx2) or (row, KV head) tasks, and per-thread scratch. */
typedef struct {
    const dec_model *m;
    const dec_step *s;
    int avx2; /* attn_avx2.c's kernels: a bfloat16 cache, head_dim a multiple of 8 up to ATTN_HEAD_DIM_MAX */
    const attn_piece *pieces; /* avx2 only */
    int n_pieces;
    const int32_t *seq_of; /* t: each row's sequence */
    float *scratch;        /* threads x scratch_floats */
    int64_t scratch_floats;
} attn_plan;

/* Floats of scratch one thread needs where the step's rows see at most `top_keys` keys. */
int64_t attn_scratch_floats(const dec_model *m, int64_t top_keys);

/* The most pieces attn_pieces writes for a step of t rows in s sequences. */
int64_t attn_max_pieces(const dec_model *m, int64_t t);

/* The step's query vectors cut into pieces; how many. */
int attn_pieces(const dec_model *m, const dec_step *s, int threads, attn_piece *out);

/* att (t x n_heads * head_dim) <- the layer's attention for every row, from q in qkv (t x nq). */
void decode_attention(pool *p, const attn_plan *plan, const dec_layer *l, const float *qkv, int64_t nq,
                      const void *k_cache, const void *v_cache, float *att);

#endif
