/* GGUF blocks -> the canonical form of lexi_cpu.h, one function per type (ggml-common.h's layouts).

   Included by each ISA's file (gemm_scalar.c, gemm_avx2.c) so the same loops compile for that ISA: the loops
   over a block's bytes are written for the compiler to vectorize. Each follows ggml's dequantize_row_<type>
   and writes, for value j of the chunk, w[j] = D[j/32] * s[j/16] * v[j] + Dm[j/32] * o[j/16]. `FP16(p)` (defined
   by the including file) reads a little-endian fp16 at p as float.
*/
#include <string.h>

static inline int32_t scale_pair(int16_t s) { return (int32_t)(((uint32_t)(uint16_t)s << 16) | (uint16_t)s); }

/* 32-block b: groups 2b and 2b+1 have scales s0, s1 and offsets o0, o1. */
static inline void set_block(const unpack_out *u, int b, float D, int s0, int s1, float Dm, int o0, int o1) {
    const int st = u->stride;
    u->D[b * st] = D;
    u->Dm[b * st] = Dm;
    u->s[2 * b * st] = scale_pair((int16_t)s0);
    u->s[(2 * b + 1) * st] = scale_pair((int16_t)s1);
    u->o[2 * b * st] = (int16_t)o0;
    u->o[2 * b * st + 1] = (int16_t)o1;
}

static inline void nibbles16(const uint8_t *qs, uint8_t *v) {
    for (int j = 0; j < 16; j++) {
        v[j] = qs[j] & 15;
        v[j + 16] = qs[j] >> 4;
    }
}

static inline uint32_t read_u32(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

static void unpack_q4_0(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 18;
        float d = FP16(p);
        nibbles16(p + 2, u->v + 32 * b);
        set_block(u, b, d, 1, 1, -d, 8, 8);
    }
}

static void unpack_q4_1(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 20;
        float d = FP16(p), m = FP16(p + 2);
        nibbles16(p + 4, u->v + 32 * b);
        set_block(u, b, d, 1, 1, m, 1, 1);
    }
}

static inline void fifth_bits(const uint8_t *qs, uint32_t qh, uint8_t *v) {
    for (int j = 0; j < 16; j++) {
        v[j] = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        v[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static void unpack_q5_0(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 22;
        float d = FP16(p);
        fifth_bits(p + 6, read_u32(p + 2), u->v + 32 * b);
        set_block(u, b, d, 1, 1, -d, 16, 16);
    }
}

static void unpack_q5_1(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 24;
        float d = FP16(p), m = FP16(p + 2);
        fifth_bits(p + 8, read_u32(p + 4), u->v + 32 * b);
        set_block(u, b, d, 1, 1, m, 1, 1);
    }
}

static void unpack_q8_0(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 34;
        memcpy(u->v + 32 * b, p + 2, 32);
        set_block(u, b, FP16(p), 1, 1, 0.0f, 0, 0);
    }
}

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline void iq4_values(const uint8_t *qs, uint8_t *v) {
    for (int j = 0; j < 16; j++) {
        v[j] = (uint8_t)kvalues_iq4nl[qs[j] & 15];
        v[j + 16] = (uint8_t)kvalues_iq4nl[qs[j] >> 4];
    }
}

static void unpack_iq4_nl(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 18;
        iq4_values(p + 2, u->v + 32 * b);
        set_block(u, b, FP16(p), 1, 1, 0.0f, 0, 0);
    }
}

/* MXFP4: e2m1 values times 2^(e - 128) (ggml_e8m0_to_fp32_half); stored as value + 12 (0..24), offset 12 x -D. */
static const uint8_t kvalues_mxfp4_plus12[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

static inline float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void unpack_mxfp4(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *p = row + (k0 / 32 + b) * 17;
        float d = e8m0_half(p[0]);
        uint8_t *v = u->v + 32 * b;
        for (int j = 0; j < 16; j++) {
            v[j] = kvalues_mxfp4_plus12[p[1 + j] & 15];
            v[j + 16] = kvalues_mxfp4_plus12[p[1 + j] >> 4];
        }
        set_block(u, b, d, 1, 1, -d, 12, 12);
    }
}

/* ggml's get_scale_min_k4 for all eight sub-blocks of a Q4_K / Q5_K super-block. */
static inline void scale_min_k4(const uint8_t *q, int *sc, int *m) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

static void unpack_q4_k(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 144;
        float d = FP16(p), dmin = FP16(p + 2);
        int sc[8], m[8];
        scale_min_k4(p + 4, sc, m);
        const uint8_t *qs = p + 16;
        uint8_t *v = u->v + 256 * sb;
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                v[64 * j + l] = qs[32 * j + l] & 15;
                v[64 * j + 32 + l] = qs[32 * j + l] >> 4;
            }
        }
        for (int t = 0; t < 8; t++) set_block(u, 8 * sb + t, d, sc[t], sc[t], -dmin, m[t], m[t]);
    }
}

static void unpack_q5_k(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 176;
        float d = FP16(p), dmin = FP16(p + 2);
        int sc[8], m[8];
        scale_min_k4(p + 4, sc, m);
        const uint8_t *qh = p + 16, *qs = p + 48;
        uint8_t *v = u->v + 256 * sb;
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                v[64 * j + l] = (qs[32 * j + l] & 15) | (((qh[l] >> (2 * j)) & 1) << 4);
                v[64 * j + 32 + l] = (qs[32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
            }
        }
        for (int t = 0; t < 8; t++) set_block(u, 8 * sb + t, d, sc[t], sc[t], -dmin, m[t], m[t]);
    }
}

static void unpack_q6_k(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 210;
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        float d = FP16(p + 208);
        uint8_t *v = u->v + 256 * sb;
        for (int h = 0; h < 2; h++) {
            const uint8_t *l8 = ql + 64 * h, *h8 = qh + 32 * h;
            uint8_t *o = v + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (l8[l] & 15) | (((h8[l] >> 0) & 3) << 4);
                o[l + 32] = (l8[l + 32] & 15) | (((h8[l] >> 2) & 3) << 4);
                o[l + 64] = (l8[l] >> 4) | (((h8[l] >> 4) & 3) << 4);
                o[l + 96] = (l8[l + 32] >> 4) | (((h8[l] >> 6) & 3) << 4);
            }
        }
        for (int t = 0; t < 8; t++) {
            int s0 = sc[2 * t], s1 = sc[2 * t + 1];
            set_block(u, 8 * sb + t, d, s0, s1, -d, 32 * s0, 32 * s1);
        }
    }
}

static void unpack_q2_k(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 84;
        const uint8_t *scales = p, *qs = p + 16;
        float d = FP16(p + 80), dmin = FP16(p + 82);
        uint8_t *v = u->v + 256 * sb;
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) v[128 * h + 32 * j + l] = (qs[32 * h + l] >> (2 * j)) & 3;
            }
        }
        for (int t = 0; t < 8; t++) {
            int a = scales[2 * t], b = scales[2 * t + 1];
            set_block(u, 8 * sb + t, d, a & 15, b & 15, -dmin, a >> 4, b >> 4);
        }
    }
}

static void unpack_q3_k(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 110;
        const uint8_t *hm = p, *qs = p + 32;
        float d = FP16(p + 108);
        uint32_t aux[4];
        memcpy(aux, p + 96, 12);
        uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        const int8_t *scales = (const int8_t *)aux;
        uint8_t *v = u->v + 256 * sb;
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                int bit = 4 * h + j;
                for (int l = 0; l < 32; l++) {
                    v[128 * h + 32 * j + l] = ((qs[32 * h + l] >> (2 * j)) & 3) | (((hm[l] >> bit) & 1) << 2);
                }
            }
        }
        for (int t = 0; t < 8; t++) {
            int s0 = scales[2 * t] - 32, s1 = scales[2 * t + 1] - 32;
            set_block(u, 8 * sb + t, d, s0, s1, -d, 4 * s0, 4 * s1);
        }
    }
}

static void unpack_iq4_xs(const uint8_t *row, int64_t k0, int n, const unpack_out *u) {
    for (int sb = 0; sb < n / 256; sb++) {
        const uint8_t *p = row + (k0 / 256 + sb) * 136;
        float d = FP16(p);
        uint16_t scales_h = (uint16_t)(p[2] | (p[3] << 8));
        const uint8_t *scales_l = p + 4, *qs = p + 8;
        for (int t = 0; t < 8; t++) {
            int ls = ((scales_l[t / 2] >> (4 * (t % 2))) & 15) | (((scales_h >> (2 * t)) & 3) << 4);
            iq4_values(qs + 16 * t, u->v + 256 * sb + 32 * t);
            set_block(u, 8 * sb + t, d, ls - 32, ls - 32, 0.0f, 0, 0);
        }
    }
}

static const qtype_info *UNPACK_LOOKUP(int type) {
    /* block, bytes, signed, offset, steps (max|v|: 15 -> 8 steps, 31 or 24 -> 4, 63 -> 2, signed 128 -> 1; 16-value
       scales cap steps at 4) */
    static const qtype_info q4_0 = {32, 18, 0, 1, 8, unpack_q4_0}, q4_1 = {32, 20, 0, 1, 8, unpack_q4_1};
    static const qtype_info q5_0 = {32, 22, 0, 1, 4, unpack_q5_0}, q5_1 = {32, 24, 0, 1, 4, unpack_q5_1};
    static const qtype_info q8_0 = {32, 34, 1, 0, 1, unpack_q8_0}, iq4_nl = {32, 18, 1, 0, 1, unpack_iq4_nl};
    static const qtype_info mxfp4 = {32, 17, 0, 1, 4, unpack_mxfp4};
    static const qtype_info q2_k = {256, 84, 0, 1, 4, unpack_q2_k}, q3_k = {256, 110, 0, 1, 4, unpack_q3_k};
    static const qtype_info q4_k = {256, 144, 0, 1, 8, unpack_q4_k}, q5_k = {256, 176, 0, 1, 4, unpack_q5_k};
    static const qtype_info q6_k = {256, 210, 0, 1, 2, unpack_q6_k}, iq4_xs = {256, 136, 1, 0, 1, unpack_iq4_xs};
    switch (type) {
        case T_Q4_0: return &q4_0;
        case T_Q4_1: return &q4_1;
        case T_Q5_0: return &q5_0;
        case T_Q5_1: return &q5_1;
        case T_Q8_0: return &q8_0;
        case T_IQ4_NL: return &iq4_nl;
        case T_MXFP4: return &mxfp4;
        case T_Q2_K: return &q2_k;
        case T_Q3_K: return &q3_k;
        case T_Q4_K: return &q4_k;
        case T_Q5_K: return &q5_k;
        case T_Q6_K: return &q6_k;
        case T_IQ4_XS: return &iq4_xs;
        default: return NULL;
    }
}
