/* The records of a decode step (lexi/model/decode_c.py writes them with numpy, field for field): the model, its
   layers and their weights, and one step's rows. Read by decode.c and decode_attn.c alike, so they sit apart
   from either file's entry points. */
#ifndef LEXI_DECODE_RECORDS_H
#define LEXI_DECODE_RECORDS_H

#include <stdint.h>

enum { DEC_CACHE_F32 = 0, DEC_CACHE_BF16 = 1 };
enum { DEC_ACT_SILU = 0, DEC_ACT_GELU_TANH = 1 };
enum { DEC_ROUTE_SOFTMAX_TOPK = 0, DEC_ROUTE_TOPK_SOFTMAX = 1 };

/* CpuWeight.descriptor(col): every field 8 bytes, so numpy writes the record as it is laid out here. */
typedef struct {
    int64_t type, address, row_bytes, n, col, layout;
} dec_weight;

/* One layer. Addresses of float32 tensors, 0 for absent; `moe_table` 0 is a dense FFN (gate_up, down). */
typedef struct {
    int64_t attn_norm, qkv_bias, qk_norm, wo_bias, sinks, post_attn_norm, ffn_norm, post_ffn_norm;
    dec_weight qkv[3];
    dec_weight wo;
    dec_weight gate_up[2];
    dec_weight down;
    int64_t window; /* sliding window, 0 = global */
    /* mixture of experts: router (E x D), its bias (E), CpuExperts.table (3 x E x 6), biases as moe_args' */
    int64_t router, router_bias, moe_table, n_experts, top_k, expert_ffn, gate_bias, up_bias, down_bias, moe_act;
    int64_t routing;
    double alpha, limit;
} dec_layer;

typedef struct {
    int64_t n_layers, dim, n_heads, n_kv_heads, head_dim, rope_dim, rope_neox, ffn_dim, activation, terms;
    int64_t cache_type;
    double scale, eps;
    int64_t layers; /* address of n_layers dec_layer records */
} dec_model;

/* One step: t rows, sequence i owning rows [query_start[i], query_start[i + 1]), row r at positions[r]; its keys
   are every cached position <= its own (this step's rows are written first), within the layer's window. */
typedef struct {
    float *x; /* t x dim, the residual stream: read, and written with the last layer's output */
    int64_t t, s;
    const int64_t *positions, *slots;
    const int32_t *query_start;
    const int32_t *block_tables; /* s x bt_stride */
    int64_t bt_stride, block_size, num_blocks;
    const int64_t *kv; /* n_layers x 2: each layer's k and v cache (num_blocks x block_size x KVH x head_dim) */
    const float *cos_g, *sin_g, *cos_l, *sin_l; /* t x rope_dim: rope.py's cos_full and sin_signed */
} dec_step;

#endif
