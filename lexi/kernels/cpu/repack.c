/* Row-interleaved ("x8") layouts: the GGUF blocks of 8 rows rearranged so one 32-byte register holds four
   consecutive values of all eight rows, the layout the kernels of gemm_x8_avx2.c and gemm_x8_vnni.c read without
   unpacking.

   A lossless permutation of the file's bytes (Q4_K adds 32 bytes per 8 super-blocks: its 6-bit scales are kept
   as bytes), built once at load. Rows are grouped by 8 (the last group padded with zero rows); a group's
   blocks follow each other along k. Per group and block:
     Q8_0 (32 values, 272 bytes): d[8] fp16 | steps i = 0..7: rows 0..7 x values 4i..4i+3 (int8)
     Q4_0, Q4_1, Q5_0, Q5_1 (32 values; 144, 160, 176, 192 bytes): d[8] | m[8] (the _1 types) | qh[8] (u32, the
           5-bit types) | 4 registers i: row r's 4 bytes are the file's qs[4i .. 4i+3], low nibbles values 4i + e,
           high nibbles values 16 + 4i + e
     IQ4_NL (32 values, 144 bytes): Q4_0's layout (the nibbles are table indices)
     MXFP4 (32 values, 136 bytes): e[8] (the E8M0 scale bytes) | Q4_0's 4 registers
     Q4_K (256 values, 1184 bytes): d[8] | dmin[8] (fp16) | sc[8 sub-blocks][8 rows] | m[8][8] (6-bit, bytes) |
           32 registers (t, i), t = 0..3, i = 0..7: row r's 4 bytes are the file's qs[32t + 4i .. +3], whose low
           nibbles are values 64t + 4i + e and high nibbles values 64t + 32 + 4i + e
     Q6_K (256 values, 1680 bytes): d[8] fp16 | sc[8 pairs u][8 rows][2] (int8: the scales of groups 2u, 2u+1) |
           32 registers L_p: low nibble of byte (r, e) = low 4 bits of value 4p + e, high nibble = of value
           128 + 4p + e | 16 registers H_p: bits 2j..2j+1 of byte (r, e) = high 2 bits of value 4(p + 16j) + e
*/
#include <string.h>

#include "repack.h"

static void copy_u16(uint8_t *dst, const uint8_t *src) { memcpy(dst, src, 2); }

static void repack_q8_0(const uint8_t *const *rows, int64_t nb, uint8_t *dst) {
    for (int64_t b = 0; b < nb; b++, dst += 272) {
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = rows[r] ? rows[r] + b * 34 : NULL;
            if (!p) {
                memset(dst + 2 * r, 0, 2);
                for (int i = 0; i < 8; i++) memset(dst + 16 + 32 * i + 4 * r, 0, 4);
                continue;
            }
            copy_u16(dst + 2 * r, p);
            for (int i = 0; i < 8; i++) memcpy(dst + 16 + 32 * i + 4 * r, p + 2 + 4 * i, 4);
        }
    }
}

/* The 32-value 4- and 5-bit types: the scale is the block's first `d_bytes` (2: fp16; 1: MXFP4's E8M0 byte);
   `m` and `qh` say where the file's block has them (-1: none). */
static inline void repack_small(const uint8_t *const *rows, int64_t nb, uint8_t *dst, int bytes, int d_bytes, int m,
                                int qh, int qs) {
    const int out = 8 * d_bytes + (m >= 0 ? 16 : 0) + (qh >= 0 ? 32 : 0) + 128;
    for (int64_t b = 0; b < nb; b++, dst += out) {
        memset(dst, 0, (size_t)out);
        for (int r = 0; r < 8; r++) {
            if (!rows[r]) continue;
            const uint8_t *p = rows[r] + b * bytes;
            uint8_t *o = dst;
            memcpy(o + d_bytes * r, p, (size_t)d_bytes);
            o += 8 * d_bytes;
            if (m >= 0) {
                copy_u16(o + 2 * r, p + m);
                o += 16;
            }
            if (qh >= 0) {
                memcpy(o + 4 * r, p + qh, 4);
                o += 32;
            }
            for (int i = 0; i < 4; i++) memcpy(o + 32 * i + 4 * r, p + qs + 4 * i, 4);
        }
    }
}

static void repack_q4_0(const uint8_t *const *rows, int64_t nb, uint8_t *dst) { repack_small(rows, nb, dst, 18, 2, -1, -1, 2); }
static void repack_q4_1(const uint8_t *const *rows, int64_t nb, uint8_t *dst) { repack_small(rows, nb, dst, 20, 2, 2, -1, 4); }
static void repack_q5_0(const uint8_t *const *rows, int64_t nb, uint8_t *dst) { repack_small(rows, nb, dst, 22, 2, -1, 2, 6); }
static void repack_q5_1(const uint8_t *const *rows, int64_t nb, uint8_t *dst) { repack_small(rows, nb, dst, 24, 2, 2, 4, 8); }
static void repack_mxfp4(const uint8_t *const *rows, int64_t nb, uint8_t *dst) { repack_small(rows, nb, dst, 17, 1, -1, -1, 1); }

static void scale_min_k4(const uint8_t *q, uint8_t *sc, uint8_t *m) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

static void repack_q4_k(const uint8_t *const *rows, int64_t nb, uint8_t *dst) {
    for (int64_t sb = 0; sb < nb; sb++, dst += 1184) {
        memset(dst, 0, 1184);
        for (int r = 0; r < 8; r++) {
            if (!rows[r]) continue;
            const uint8_t *p = rows[r] + sb * 144;
            copy_u16(dst + 2 * r, p);
            copy_u16(dst + 16 + 2 * r, p + 2);
            uint8_t sc[8], m[8];
            scale_min_k4(p + 4, sc, m);
            for (int t = 0; t < 8; t++) {
                dst[32 + 8 * t + r] = sc[t];
                dst[96 + 8 * t + r] = m[t];
            }
            for (int w = 0; w < 32; w++) memcpy(dst + 160 + 32 * w + 4 * r, p + 16 + 4 * w, 4);
        }
    }
}

static void repack_q6_k(const uint8_t *const *rows, int64_t nb, uint8_t *dst) {
    for (int64_t sb = 0; sb < nb; sb++, dst += 1680) {
        memset(dst, 0, 1680);
        uint8_t *L = dst + 144, *H = dst + 144 + 1024;
        for (int r = 0; r < 8; r++) {
            if (!rows[r]) continue;
            const uint8_t *p = rows[r] + sb * 210;
            copy_u16(dst + 2 * r, p + 208);
            for (int u = 0; u < 8; u++) {
                dst[16 + 16 * u + 2 * r] = p[192 + 2 * u];
                dst[16 + 16 * u + 2 * r + 1] = p[192 + 2 * u + 1];
            }
            /* value v = 128h + 32qd + l (ggml's dequantize_row_q6_K) is step s = 32h + 8qd + l/4, byte l%4 of row r */
            for (int h = 0; h < 2; h++) {
                for (int qd = 0; qd < 4; qd++) {
                    const uint8_t *ql = p + 64 * h + 32 * (qd & 1), *qh = p + 128 + 32 * h;
                    const int lo_shift = qd < 2 ? 0 : 4, hi_shift = 2 * qd;
                    for (int l = 0; l < 32; l++) {
                        const int s = 32 * h + 8 * qd + l / 4, at = 4 * r + l % 4;
                        const uint8_t lo4 = (ql[l] >> lo_shift) & 15, hi2 = (qh[l] >> hi_shift) & 3;
                        L[32 * (s % 32) + at] |= (uint8_t)(lo4 << (s < 32 ? 0 : 4));
                        H[32 * (s % 16) + at] |= (uint8_t)(hi2 << (2 * (s / 16)));
                    }
                }
            }
        }
    }
}

const x8_layout *x8_lookup(int type) {
    static const x8_layout q8_0 = {32, 272, repack_q8_0}, q4_k = {256, 1184, repack_q4_k};
    static const x8_layout q6_k = {256, 1680, repack_q6_k};
    static const x8_layout q4_0 = {32, 144, repack_q4_0}, q4_1 = {32, 160, repack_q4_1};
    static const x8_layout q5_0 = {32, 176, repack_q5_0}, q5_1 = {32, 192, repack_q5_1};
    static const x8_layout iq4_nl = {32, 144, repack_q4_0}, mxfp4 = {32, 136, repack_mxfp4};
    switch (type) {
        case T_IQ4_NL: return &iq4_nl;
        case T_MXFP4: return &mxfp4;
        case T_Q4_0: return &q4_0;
        case T_Q4_1: return &q4_1;
        case T_Q5_0: return &q5_0;
        case T_Q5_1: return &q5_1;
        case T_Q8_0: return &q8_0;
        case T_Q4_K: return &q4_k;
        case T_Q6_K: return &q6_k;
        default: return NULL;
    }
}

int64_t x8_bytes(const x8_layout *l, int64_t n, int64_t k) { return (n + 7) / 8 * (k / l->block) * l->bytes; }

void x8_repack_group(const x8_layout *l, const uint8_t *data, int64_t row_bytes, int64_t n, int64_t k, int64_t group,
                     uint8_t *dst) {
    const uint8_t *rows[8];
    for (int r = 0; r < 8; r++) {
        int64_t row = 8 * group + r;
        rows[r] = row < n ? data + row * row_bytes : NULL;
    }
    l->repack(rows, k / l->block, dst + group * (k / l->block) * l->bytes);
}
