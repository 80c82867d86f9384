/* LexiEngine's CPU kernels: y = x W^T straight over GGUF blocks, the shared declarations.

   The data flow of one quantized matmul (qgemm.c):
     1. x (m x k float32) is quantized to int8 with one float scale per activation block B, as llama.cpp does:
        B = 32 values for the 32-value weight types (its Q8_0), 256 for the K-quants and IQ4_XS (its Q8_K); the
        sum of every 16 values is kept for the weights' offsets (act_q8). In two-term mode (the default) what a
        row's int8 values leave of it is quantized again into a second row, and a pair's result is the sum of its
        two rows' results: the weights are streamed once for both, and x is then carried to ~16 bits (int8 alone
        rounds each value to 1/254 of its block's largest, which moves near-tied logits);
     2. each thread takes strips of STRIP weight rows and unpacks them, a chunk of KC values at a time, from the
        file's blocks into one canonical form (unpack_impl.h): small unsigned (or signed) integers v, an integer
        scale s and an integer offset o per 16 values, and float factors D and Dm per 32, so that
            w[j] = D[j / 32] * s[j / 16] * v[j] + Dm[j / 32] * o[j / 16];
     3. a microkernel (gemm_avx2.c, gemm_scalar.c) computes, for every (row, column) pair, in this order:
            acc = 0
            for each activation block B:  isum = sum_{g in B} s_g sum_{j in g} v_j q_j        (int32, exact)
                                          osum = sum_{g in B} o_g sum_{j in g} q_j            (int32, exact)
                                          acc = fma(float(isum), D_B * d_B, acc)
                                          acc = fma(float(osum), Dm_B * d_B, acc)   (types with offsets)
        Integer sums are exact in any order, so the two ISAs and every kernel shape, batch size and thread agree
        bit for bit: a row's result does not depend on the batch it shares (--deterministic relies on it).
*/
#ifndef LEXI_CPU_H
#define LEXI_CPU_H

#include <stddef.h>
#include <stdint.h>

#define QA 32            /* activation block: elements per int8 scale */
#define KC 1024          /* elements of k unpacked at a time (a multiple of every block size) */
#define STRIP 8          /* weight rows a microkernel call covers */

/* ggml type ids (gguf.GGMLQuantizationType) */
enum {
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
    T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ4_NL = 20, T_IQ4_XS = 23,
    T_BF16 = 30, T_MXFP4 = 39,
};

/* x quantized: q (m x k int8), d (m x k/block scales), g (m x k/16 int16: the sum of each 16 q's).
   `block` is 32 for the 32-value weight types (llama.cpp's Q8_0 activations) and 256 for the K-quants and IQ4_XS
   (its Q8_K): one scale per 256 values lets their products add up in integers across a whole super-block. */
typedef struct {
    int8_t *q;
    float *d;
    int16_t *g;
    int64_t m, k;
    int block;
} act_q8;

/* Where an unpacker writes one row's chunk: values v[j] contiguously; the scale of group g (as the int16 pair
   s, s in one int32, ready for vpmaddwd) at s[g * stride]; D and Dm of 32-block b at [b * stride]; the offsets
   of groups 2i and 2i+1 side by side at o[2 * i * stride] (an int16 pair for vpmaddwd). The AVX2 kernels so have
   a strip's rows interleaved (stride STRIP) and the portable ones each row's own arrays (stride 1). */
typedef struct {
    uint8_t *v;
    int32_t *s;
    int16_t *o;
    float *D, *Dm;
    int stride;
} unpack_out;

/* How a type unpacks: block size in elements and bytes, signed values, whether Dm o is ever nonzero, and `steps`:
   how many 4-value steps of products fit an int16 lane before its scale is applied (vpmaddubsw pairs are at most
   2 x 127 x max|v|, and a lane must not pass 32767; nor may a sum cross a change of scale). */
typedef struct {
    int block, bytes, is_signed, has_offset, steps;
    /* unpack `n` elements starting at element `k0` (a multiple of `block`) of the row at `row` */
    void (*unpack)(const uint8_t *row, int64_t k0, int n, const unpack_out *out);
} qtype_info;

/* One weight of a (possibly fused) matmul: its rows land in output columns [col, col + n). `layout` 0 is the
   file's rows (row_bytes apart); 1 is repack.c's row-interleaved groups (row_bytes: the bytes of one group). */
typedef struct {
    int type;
    const uint8_t *data;
    int64_t row_bytes, n, col;
    int layout;
} weight_desc;

/* Strip kernels: acc (m x STRIP floats, column c's accumulators for the strip's rows) takes the part of every
   pair that the chunk of `n` values starting at value `k0` contributes, for the STRIP weight rows at `rows` (NULL
   past the weight's last row: zeros) against every row of x. `work` is the kernel's scratch, STRIP_WORK bytes. */
#define STRIP_WORK (STRIP * KC * 2 + STRIP * (KC / 16) * 6 + STRIP * (KC / QA) * 8 + 256)
typedef void (*strip_fn)(const qtype_info *info, const uint8_t *const *rows, int64_t k0, int n, const act_q8 *a,
                         float *acc, void *work);
/* Decode kernels (gemv_avx2.c): m <= GEMV_MAX_M rows of x against the 4 weight rows at `rows` over all k values;
   out[c * ld + r] = row r's result for column c, the canonical arithmetic's bit for bit. */
#define GEMV_MAX_M 8
typedef void (*gemv_fn)(const uint8_t *const *rows, int64_t k, const act_q8 *a, float *out, int ld);

/* Kernels over repack.c's row-interleaved groups: acc (m x 8) = a group's 8 rows against every row of x. */
typedef void (*x8_kernel)(const uint8_t *group, int64_t k, const act_q8 *a, float *acc);

/* Quantize rows [row0, row0 + rows) of x into rows of `a`; with `second` >= 0, also what each row's int8 values
   leave of it (x - d q, quantized the same way) into row `second` + r: two int8 terms whose sum carries ~16 bits. */
typedef void (*quantize_fn)(const float *x, int64_t ldx, int64_t row0, int64_t rows, act_q8 *a, int64_t second);

typedef struct {
    strip_fn strip;
    quantize_fn quantize;
    const qtype_info *(*lookup)(int type); /* the unpackers, compiled for this ISA; NULL for an unknown type */
    gemv_fn (*gemv)(int type);             /* a decode kernel for the type, or NULL (the strip kernels serve) */
    x8_kernel (*x8)(int type);             /* a kernel for the type's interleaved layout, or NULL */
    const char *name;
} isa_kernels;

extern const isa_kernels kernels_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const isa_kernels kernels_avx2;
gemv_fn gemv_lookup_avx2(int type);
x8_kernel x8_kernel_avx2(int type);
/* AVX2 plus AVX-512 F/BW/VL/VNNI: gemm_avx2.c's strips and quantizer, the vpdpbusd kernels of gemm_x8_vnni.c */
extern const isa_kernels kernels_vnni;
x8_kernel x8_kernel_vnni(int type);
#endif

float fp16_to_fp32(uint16_t h);

/* The thread pool (pool.c): run fn(ctx, task, thread) for task in [0, ntasks) on `threads` threads, the caller
   among them (thread 0). Workers spin briefly for the next job, then sleep. */
typedef struct pool pool;
pool *pool_create(int threads);
void pool_destroy(pool *p);
int pool_threads(const pool *p);
void pool_run(pool *p, void (*fn)(void *ctx, int task, int thread), void *ctx, int ntasks);

#endif
