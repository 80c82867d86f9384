/* The row-interleaved layouts (repack.c) and their kernels (gemm_x8_avx2.c, gemm_x8_vnni.c). */
#ifndef LEXI_REPACK_H
#define LEXI_REPACK_H

#include "lexi_cpu.h"

typedef struct {
    int block, bytes; /* values per block along k, bytes per block of an 8-row group */
    void (*repack)(const uint8_t *const *rows, int64_t nb, uint8_t *dst); /* 8 rows (NULL: zero) -> a group */
} x8_layout;

/* The kernels' software prefetch: every cache line of the block X8_PREFETCH bytes ahead of `block` (`bytes` long),
   into L2. The hardware prefetcher alone leaves the x8 kernels waiting on memory: Q6_K reads three interleaved
   streams per block (L_p, L_{p+16}, H_p), and one thread measured 5 GB/s from memory against 15 GB/s from L2;
   with this, 22 GB/s (Q4_K 22 -> 27 GB/s; Zen 4, VNNI kernels). A prefetch never faults: past the end is harmless. */
#define X8_PREFETCH 16384
static inline void x8_prefetch(const uint8_t *block, int bytes) {
    _Pragma("GCC unroll 32") for (int l = 0; l < bytes; l += 64) __builtin_prefetch(block + X8_PREFETCH + l, 0, 2);
}

const x8_layout *x8_lookup(int type); /* NULL: the type keeps the file's layout */
int64_t x8_bytes(const x8_layout *l, int64_t n, int64_t k);
/* Group `group` (rows 8g..8g+7) of the (n x k) weight at `data` into its place in `dst`. */
void x8_repack_group(const x8_layout *l, const uint8_t *data, int64_t row_bytes, int64_t n, int64_t k, int64_t group,
                     uint8_t *dst);


#endif
