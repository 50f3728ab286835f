/* s8_gemm.h - packed int16 operands and the 2 x 2 multiply-accumulate tile of the int8
 * convolutions (internal to runtime/c/kernels/int8).
 *
 * Every convolution sum is computed as dot products of two packed operands, A (weights,
 * or the output gradient in the weight gradient) and B (the im2col columns, or input
 * taps), both int16, K padded with zeros to a multiple of 4. A pair of vectors (two
 * rows of A, or two columns of B) is stored quad by quad, each quad as
 *
 *     u0 u2 u1 u3  v0 v2 v1 v3      (int16; as words: (u0,u2) (u1,u3) (v0,v2) (v1,v3))
 *
 * the order SXTB16 / SXTAB16 produce from four int8 (bytes 0 and 2, then 1 and 3), so
 * contiguous int8 data packs with two instructions per quad; SMLAD then sums a word of
 * A against the same word of B, and both orders agree because both operands use one.
 * The tile computes the four dot products of a pair of A with a pair of B: per quad,
 * three LDM (four words of B, two of each A vector) and eight SMLAD for 16
 * multiply-accumulates. Sums wrap modulo 2^32, so K's order does not matter. */
#ifndef S8_GEMM_H
#define S8_GEMM_H

#include "s8_arith.h"

S8_INLINE int32_t s8_round4(int32_t k) { return (k + 3) & ~3; }
S8_INLINE int32_t s8_round2(int32_t k) { return (k + 1) & ~1; }
/* Bytes of a workspace part, rounded up so that every part starts 8-byte aligned. */
S8_INLINE int32_t s8_ws_part(int32_t bytes) { return (bytes + 7) & ~7; }

/* Where element k of a pair's first vector lives (its second vector: + 4). */
S8_INLINE int32_t s8_slot(int32_t k) { return (k & ~3) * 2 + ((k & 1) << 1) + ((k >> 1) & 1); }

/* acc[0..3] += (a0.b0, a0.b1, a1.b0, a1.b1) over `quads` quads of a packed A pair and B pair. */
void s8_tile_2x2(int32_t quads, const int16_t *a, const int16_t *b, uint32_t acc[4]);

/* Pack `rows` vectors of k int8 (vector r at src + r * row_step, contiguous) as pairs;
 * K padded to s8_round4(k) and rows to an even count with zeros. dst:
 * s8_round2(rows) * s8_round4(k) int16. */
void s8_pack_rows(int32_t rows, int32_t k, const int8_t *src, int32_t row_step, int16_t *dst);

/* ---- the correlation driver: out = epilogue(A . im2col(in)) ------------------------
 * For every group, `a` holds the packed A of that group (rows = output channels of the
 * group, K = in channels of the group x kh x kw in that order; the caller packs it with
 * s8_pack_rows, `pack` is called with the group index before its columns run). in is
 * int8 [n, in_c, in_h, in_w] read with offset z (padded positions 0), out
 * [n, out_c, out_h, out_w]. */
typedef struct s8_corr {
    int32_t n, in_c, in_h, in_w, out_c, out_h, out_w;
    int32_t kh, kw, stride_h, stride_w, pad_top, pad_left, groups;
    int32_t z;
    const int8_t *in;
} s8_corr;

/* The forward epilogue: y = sat(requantize(acc) + z_y, act_min, act_max), vrange. */
typedef struct s8_fwd_out {
    const int32_t *bias; /* [out_c] or NULL */
    const s8_rq *rq;     /* [out_c] prepared requantizations */
    int32_t z_y, act_min, act_max;
    int8_t *y;
    int32_t vmin, vmax;
} s8_fwd_out;

/* The input-gradient epilogue: g_x = sat(mul_shift(acc, mult, n), +-127), amax. */
typedef struct s8_grad_out {
    int32_t mult, n;
    int8_t *g_x;
    uint32_t amax;
} s8_grad_out;

typedef void (*s8_pack_group)(void *ctx, int32_t group, int16_t *a);

int32_t s8_corr_ws(const s8_corr *c);
void s8_corr_fwd(const s8_corr *c, s8_pack_group pack, void *ctx, s8_fwd_out *o, void *ws);
void s8_corr_grad(const s8_corr *c, s8_pack_group pack, void *ctx, s8_grad_out *o, void *ws);

/* The epilogues one output at a time (shared with the depthwise kernels). */
S8_INLINE int8_t s8_fwd_one(s8_fwd_out *o, const s8_rq *rq, uint32_t acc)
{
    int32_t v = s8_rq_apply(rq, (int32_t)acc);
    if (v < o->vmin) o->vmin = v;
    if (v > o->vmax) o->vmax = v;
    if (v > o->act_max - o->z_y) return (int8_t)o->act_max;
    if (v < o->act_min - o->z_y) return (int8_t)o->act_min;
    return (int8_t)(v + o->z_y);
}

S8_INLINE int8_t s8_grad_one(s8_grad_out *o, uint32_t acc)
{
    int64_t v = s8_mul_shift((int32_t)acc, o->mult, o->n);
    uint32_t mag = s8_abs_cap(v);
    if (mag > o->amax) o->amax = mag;
    return (int8_t)s8_sat64(v, -127, 127);
}

#endif
