/* s8_gemm.h - packed int16 operands and the 2 x 2 multiply-accumulate tile of the int8
 * convolutions (internal to runtime/c/kernels/int8).
 *
 * Every convolution sum is computed as dot products of two packed operands, A (weights,
 * or the output gradient in the weight gradient) and B (the im2col columns, or input
 * taps), both int16, K padded to a multiple of 4. A pair of vectors (two rows of A, or
 * two columns of B) is stored quad by quad, each quad as
 *
 *     u0 u2 u1 u3  v0 v2 v1 v3      (int16; as words: (u0,u2) (u1,u3) (v0,v2) (v1,v3))
 *
 * the order SXTB16 / SXTAB16 produce from four int8 (bytes 0 and 2, then 1 and 3), so
 * contiguous int8 data packs with two instructions per quad; SMLAD then sums a word of
 * A against the same word of B, and both orders agree because both operands use one.
 * Where K is padded, one operand holds zeros and the other any readable value. The
 * tile computes the four dot products of a pair of A with a pair of B: per quad, three
 * LDM (four words of B, two of each A vector) and eight SMLAD for 16
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

/* For each A pair r < pairs (the pairs follow each other, 8 * quads int16 apart) and one
 * B pair: acc[2r * rs + (0, 1)] = init[2r] + (a0.b0, a0.b1), acc[(2r + 1) * rs + (0, 1)] =
 * init[2r + 1] + (a1.b0, a1.b1): rows of accumulators rs words apart, two columns each;
 * quads >= 1. */
void s8_tiles(int32_t quads, int32_t pairs, const int16_t *a, const int16_t *b, const uint32_t *init, uint32_t *acc,
              int32_t rs);

/* The same tile over rows in natural order (the weight gradient's operands): A pair r is
 * rows 2r and 2r + 1 of a (S8_ROW int16 apart), B the rows b0 and b1 (anywhere, 4-byte
 * aligned), each quads * 4 elements long; per quad four LDRD and eight SMLAD. */
#define S8_ROW 64
void s8_tiles_rows(int32_t quads, int32_t pairs, const int16_t *a, const int16_t *b0, const int16_t *b1, uint32_t *acc,
                   int32_t rs);

/* Four int8 (bytes of w) plus offset as the two words of a packed quad: (x0,x2), (x1,x3). */
S8_INLINE void s8_quad(uint32_t w, uint32_t off2, uint32_t *lo, uint32_t *hi)
{
    *lo = s8_sxtab16(off2, w);
    *hi = s8_sxtab16(off2, s8_ror8(w));
}

/* Pack `rows` vectors of k int8 (vector r at src + r * row_step, contiguous) as pairs;
 * K padded to s8_round4(k) and rows to an even count with zeros. dst:
 * s8_round2(rows) * s8_round4(k) int16. */
void s8_pack_rows(int32_t rows, int32_t k, const int8_t *src, int32_t row_step, int16_t *dst);

/* n int8 + offset widened to int16 (any alignment). */
void s8_widen(int16_t *d, const int8_t *s, int32_t n, int32_t offset);

/* ---- the correlation driver: out = epilogue(A . im2col(in)) ------------------------
 * For every group, `a` holds the packed A of that group (rows = output channels of the
 * group, K = in channels of the group x kh x kw in that order; `pack` is called with
 * the group index before its columns run). in is int8 [n, in_c, in_h, in_w] read with
 * offset -z (padded positions 0), out [n, out_c, out_h, out_w]. */
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
    s8_ms ms;
    int8_t *g_x;
    uint32_t amax;
} s8_grad_out;

typedef void (*s8_pack_group)(void *ctx, int32_t group, int16_t *a);

int32_t s8_corr_ws(const s8_corr *c);
void s8_corr_fwd(const s8_corr *c, s8_pack_group pack, void *ctx, s8_fwd_out *o, void *ws);
void s8_corr_grad(const s8_corr *c, s8_pack_group pack, void *ctx, s8_grad_out *o, void *ws);

/* The epilogues, one output at a time, on a local copy of the state (keep it in
 * registers: the caller copies s8_fwd_out / s8_grad_out in and out around its loops). */
typedef struct s8_fwd_state {
    int32_t z_y, lo, hi, lo_v, hi_v; /* act_min, act_max and act_* - z_y */
    int32_t vmin, vmax;
} s8_fwd_state;

S8_INLINE s8_fwd_state s8_fwd_begin(const s8_fwd_out *o)
{
    s8_fwd_state st = {o->z_y, o->act_min, o->act_max, o->act_min - o->z_y, o->act_max - o->z_y, o->vmin, o->vmax};
    return st;
}

S8_INLINE int8_t s8_fwd_one(s8_fwd_state *st, const s8_rq *rq, uint32_t acc)
{
    int32_t v = s8_rq_right(rq, (int32_t)acc);
    st->vmin = v < st->vmin ? v : st->vmin;
    st->vmax = v > st->vmax ? v : st->vmax;
    return (int8_t)(v > st->hi_v ? st->hi : (v < st->lo_v ? st->lo : v + st->z_y));
}

/* The epilogues over rows of accumulators: for r < rows, j < n, y[r * y_row + j * step]
 * from acc[r * acc_step + j], with row r's requantization rq[r * rq_step] (the gradient:
 * one ms). */
void s8_epi_fwd(const uint32_t *acc, int32_t rows, int32_t acc_step, int32_t n, int8_t *y, int32_t y_row,
                int32_t step, const s8_rq *rq, int32_t rq_step, s8_fwd_state *st);
void s8_epi_grad(const uint32_t *acc, int32_t rows, int32_t acc_step, int32_t n, int8_t *y, int32_t y_row,
                 int32_t step, const s8_ms *ms, uint32_t *amax);

S8_INLINE int8_t s8_grad_one(const s8_ms *ms, uint32_t *amax, uint32_t acc)
{
    int64_t v = s8_ms_apply(ms, (int32_t)acc);
    uint32_t mag = s8_abs_cap(v);
    *amax = mag > *amax ? mag : *amax;
    return (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
}

#endif
