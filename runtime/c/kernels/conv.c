/* conv.c - 2-D convolution, forward and the three backward kernels (NCHW, float32).
 *
 * Every kernel is a sum of products kept in register tiles, the way a hand-tuned GEMM
 * keeps its accumulators: the M4's FPU adds or multiplies in 1 cycle but loads in 2, so
 * what costs is reloading an accumulator or an operand, not the arithmetic.
 *
 *   - Forward and input gradient (stride 1) are one correlation (`corr`): R = 4 output
 *     channels x C = 4 outputs in 16 s-registers, summed over channels, kernel rows and
 *     taps; each step loads 4 weights and 4 inputs for 16 multiply-adds. Blocks run
 *     along a row over the columns where every tap is inside the input (clipping the
 *     kernel rows), or, on narrow planes (kws_dscnn's 25 x 5), down a column over the
 *     rows where every kernel row is inside (clipping the taps); what is left takes an
 *     R x 1 tile over its own taps. So no inner loop ever tests a bound. A 1x1
 *     convolution is one loop over channels; a 3x3 row reads one 6-input segment for its
 *     3 taps. The input gradient is the forward's correlation of dy with the weights
 *     transposed and flipped (taps run backwards through the input).
 *   - Weight gradient: for each tap, 4 output channels x 4 input channels summed over
 *     the positions where the tap is inside the input (one rectangle per tap).
 *     Channels left over (fewer than 4 inputs per group, as in a first layer) take
 *     4 output channels x 3 or 4 neighbouring taps of one kernel row instead.
 *   - Depthwise 3x3 (stride 1): the 9 weights stay in registers and blocks of 4 (or 2)
 *     outputs run down a column, each input row read once for all its taps; the edge
 *     columns are compile-time variants without the outside tap. The weight gradient
 *     keeps its 9 sums in registers the same way.
 *   - Anything else (output channels per group not a multiple of 4, input gradient of a
 *     strided convolution, dilated taps in the weight gradient) runs the plain loops of
 *     the definition.
 *
 * Multiplies and adds stay separate (VMUL + VADD: 2 cycles; a fused VFMA/VMLA is one
 * instruction but 3 cycles). Every output element is written exactly once (no zeroing
 * pass), in a fixed order of terms: bias, then channel, kernel row, tap (the weight
 * gradient: batch, row, column), so recomputing a node gives the same bytes. No scratch
 * memory: the stack holds only the tiles' registers. */
#include "poet_kernels.h"

/* TILE: a template instantiated with constant block sizes; UNROLL: unroll the loop over a
 * block (constant bounds), so that the block's accumulators and operands are registers. */
#if defined(__GNUC__)
#define TILE static inline __attribute__((always_inline))
#define NOINLINE __attribute__((noinline))
#else
#define TILE static inline
#define NOINLINE
#endif
#if defined(__GNUC__) && !defined(__clang__) /* clang unrolls these itself, and warns where it cannot */
#define UNROLL _Pragma("GCC unroll 8")
#else
#define UNROLL
#endif

/* [*t0, *t1): the t in [0, n) with 0 <= base + t * step < extent (step != 0; a run,
 * since the positions are monotonic in t). */
static void span(int32_t base, int32_t step, int32_t n, int32_t extent, int32_t *t0, int32_t *t1)
{
    int32_t lo = 0, hi = n;
    while (lo < hi && (uint32_t)(base + lo * step) >= (uint32_t)extent) lo++;
    while (hi > lo && (uint32_t)(base + (hi - 1) * step) >= (uint32_t)extent) hi--;
    *t0 = lo;
    *t1 = hi;
}

/* ---- the correlation of forward and input gradient ------------------------------------
 * out[r][oy][ox] = bias[r] + sum_{c < n_c, i < kh, j < kw} W(r, c, i, j) *
 *                  in[c][oy * sy + by + i * ey][ox * sx + bx + j * ex]
 * with W(r, c, i, j) = w[r * w_r + c * w_c + i * kw + j]: each (r, c) has its kh * kw
 * taps contiguous, in the order they are summed. */
typedef struct corr {
    const float *in;
    int32_t in_c, in_h, in_w; /* in_c: elements between the input channels' planes */
    const float *w;
    int32_t w_r, w_c;
    int32_t n_r, n_c, kh, kw;
    int32_t sy, sx, by, bx, ey, ex;
    float *out; /* n_r planes of out_h x out_w, contiguous */
    int32_t out_h, out_w;
    const float *bias; /* n_r values, or NULL */
} corr;

/* A run of tiles: n_blk blocks of R output channels x C outputs, each output summed over
 * n_c channels x n_rows kernel rows x n_taps taps. x and w are the input and weight of
 * (channel 0, first summed row, first summed tap) for the first output of the first block;
 * the C outputs of a block are sx inputs and y_m outputs apart, blocks x_blk and y_blk.
 * The weights of each r advance by one per tap, skip w_row after a row and w_c after a
 * channel; with WADJ the R weights of a tap are adjacent instead and a tap advances w_tap. */
typedef struct tile_args {
    const float *x;
    int32_t x_c, x_row, x_tap, sx, x_blk;
    const float *w;
    int32_t w_r, w_tap, w_row, w_c;
    int32_t n_c, n_rows, n_taps, n_blk;
    const float *bias; /* R values or NULL */
    float *y;
    int32_t y_r, y_m, y_blk; /* output elements between channels, a block's outputs, blocks */
} tile_args;

/* S: sx when a constant (0: a->sx). K3 = +1 or -1: each kernel row is 3 taps one input
 * apart forwards or backwards (x_tap = K3, S = 1, C = 4), read as one segment of 6 inputs
 * instead of 3 x 4. WROW: rows skip w_row weights (their taps are clipped). */
TILE void tile(const int R, const int C, const int S, const int K3, const int WADJ, const int WROW,
               const tile_args *a)
{
    const int32_t sx = S ? S : a->sx, x_tap = a->x_tap, w_tap = a->w_tap;
    const int32_t x_row = a->x_row - a->n_taps * x_tap, x_c = a->x_c - a->n_rows * a->x_row;
    const int32_t w_row = a->w_row, w_c = a->w_c, y_m = a->y_m;
    const float *xb = a->x;
    float *yb = a->y;
    for (int32_t blk = a->n_blk; blk > 0; blk--, xb += a->x_blk, yb += a->y_blk) {
        float acc[4][4];
        const float *w0 = a->w, *w1 = w0, *w2 = w0, *w3 = w0;
        if (R > 1 && !WADJ) w1 = w0 + a->w_r, w2 = w1 + a->w_r, w3 = w2 + a->w_r;
        UNROLL
        for (int r = 0; r < R; r++) {
            const float b = a->bias ? a->bias[r] : 0.0f;
            UNROLL
            for (int m = 0; m < C; m++) acc[r][m] = b;
        }
        const float *xp = xb;
        for (int32_t c = a->n_c; c > 0; c--) {
            for (int32_t i = a->n_rows; i > 0; i--) {
                if (K3) {
                    float sg[6];
                    UNROLL
                    for (int t = 0; t < 6; t++) sg[t] = xp[K3 > 0 ? t : t - 2];
                    xp += 3 * K3;
                    UNROLL
                    for (int j = 0; j < 3; j++) {
                        const int o = K3 > 0 ? j : 2 - j; /* sg[o + m]: tap j's input for output m */
                        float wv = *w0++;
                        UNROLL
                        for (int m = 0; m < 4; m++) acc[0][m] += wv * sg[o + m];
                        wv = *w1++;
                        UNROLL
                        for (int m = 0; m < 4; m++) acc[1][m] += wv * sg[o + m];
                        wv = *w2++;
                        UNROLL
                        for (int m = 0; m < 4; m++) acc[2][m] += wv * sg[o + m];
                        wv = *w3++;
                        UNROLL
                        for (int m = 0; m < 4; m++) acc[3][m] += wv * sg[o + m];
                    }
                } else {
                    for (int32_t j = a->n_taps; j > 0; j--) {
                        float xv[4], wv[4];
                        UNROLL
                        for (int m = 0; m < C; m++) xv[m] = xp[m * sx];
                        xp += x_tap;
                        if (WADJ) {
                            UNROLL
                            for (int r = 0; r < R; r++) wv[r] = w0[r];
                            w0 += w_tap;
                        } else {
                            wv[0] = *w0++;
                            if (R > 1) wv[1] = *w1++, wv[2] = *w2++, wv[3] = *w3++;
                        }
                        UNROLL
                        for (int r = 0; r < R; r++)
                            UNROLL
                            for (int m = 0; m < C; m++) acc[r][m] += wv[r] * xv[m];
                    }
                }
                xp += x_row;
                if (WROW) {
                    w0 += w_row;
                    if (R > 1) w1 += w_row, w2 += w_row, w3 += w_row;
                }
            }
            xp += x_c;
            w0 += w_c;
            if (R > 1 && !WADJ) w1 += w_c, w2 += w_c, w3 += w_c;
        }
        UNROLL
        for (int r = 0; r < R; r++)
            UNROLL
            for (int m = 0; m < C; m++) yb[r * a->y_r + m * y_m] = acc[r][m];
    }
}

/* Interior rows of a row (H: every tap of the summed rows), stride 1 or 2 or any. */
static NOINLINE void tile_4x4_s1(const tile_args *a) { tile(4, 4, 1, 0, 0, 0, a); }
static NOINLINE void tile_4x4_s2(const tile_args *a) { tile(4, 4, 2, 0, 0, 0, a); }
static NOINLINE void tile_4x4_k3(const tile_args *a) { tile(4, 4, 1, 1, 0, 0, a); }
static NOINLINE void tile_4x4_k3r(const tile_args *a) { tile(4, 4, 1, -1, 0, 0, a); }
static NOINLINE void tile_4x4_adj(const tile_args *a) { tile(4, 4, 1, 0, 1, 0, a); }
static NOINLINE void tile_4x2_s1(const tile_args *a) { tile(4, 2, 1, 0, 0, 0, a); }
static NOINLINE void tile_4x2_s2(const tile_args *a) { tile(4, 2, 2, 0, 0, 0, a); }
static NOINLINE void tile_1x4_s1(const tile_args *a) { tile(1, 4, 1, 0, 0, 0, a); }
/* Any stride, taps clipped per row: columns of 4 outputs (V) and single outputs. */
static NOINLINE void tile_4x4_v(const tile_args *a) { tile(4, 4, 0, 0, 0, 1, a); }
static NOINLINE void tile_4x1(const tile_args *a) { tile(4, 1, 1, 0, 0, 1, a); }
static NOINLINE void tile_1x4_v(const tile_args *a) { tile(1, 4, 0, 0, 0, 1, a); }
static NOINLINE void tile_1x1(const tile_args *a) { tile(1, 1, 1, 0, 0, 1, a); }

/* Blocks of 4 outputs along a row (H) need interior columns, along a column (V) interior
 * rows; each mode clips the other axis's taps per block. Narrow planes (kws: 25 x 5) take V. */
static void corr_run(const corr *p)
{
    const int32_t out_plane = p->out_h * p->out_w;
    /* A 1x1 correlation over whole planes: a row of h * w outputs, one loop over channels. */
    const int flat = p->kh == 1 && p->kw == 1 && p->out_h == 1 && p->in_h == 1 && p->by == 0 && p->bx == 0;
    int32_t xa = p->out_w, xb = p->out_w, ya = p->out_h, yb = p->out_h; /* interior columns and rows */
    for (int32_t ox = 0; ox < p->out_w; ox++) {
        int32_t j0, j1;
        span(ox * p->sx + p->bx, p->ex, p->kw, p->in_w, &j0, &j1);
        if (j0 == 0 && j1 == p->kw) xa = xa < ox ? xa : ox, xb = ox + 1;
    }
    for (int32_t oy = 0; oy < p->out_h; oy++) {
        int32_t i0, i1;
        span(oy * p->sy + p->by, p->ey, p->kh, p->in_h, &i0, &i1);
        if (i0 == 0 && i1 == p->kh) ya = ya < oy ? ya : oy, yb = oy + 1;
    }
    if (xb < xa) xb = xa;
    if (yb < ya) yb = ya;
    const int vertical = !flat && (yb - ya) / 4 * p->out_w > (xb - xa) / 4 * p->out_h;
    tile_args a;
    a.w_r = p->w_r;
    a.y_r = out_plane;
    for (int32_t r = 0; r < p->n_r;) {
        const int R = p->n_r - r >= 4 ? 4 : 1;
        const float *w_r0 = p->w + r * p->w_r;
        float *y_r0 = p->out + r * out_plane;
        a.bias = p->bias ? p->bias + r : 0;
        int32_t v_done = 0; /* rows [ya, ya + v_done) done by vertical blocks */
        if (vertical) {
            const int32_t nb = (yb - ya) / 4;
            v_done = nb * 4;
            a.n_c = p->n_c, a.n_rows = p->kh, a.n_blk = nb;
            a.x_c = p->in_c, a.x_row = p->ey * p->in_w, a.x_tap = p->ex;
            a.sx = p->sy * p->in_w, a.x_blk = 4 * a.sx;
            a.y_m = p->out_w, a.y_blk = 4 * p->out_w;
            a.w_tap = 1;
            for (int32_t ox = 0; ox < p->out_w && nb > 0; ox++) {
                int32_t j0, j1;
                span(ox * p->sx + p->bx, p->ex, p->kw, p->in_w, &j0, &j1);
                a.n_taps = j1 - j0;
                a.w_row = p->kw - a.n_taps;
                a.w_c = p->w_c - p->kh * p->kw;
                a.x = p->in + (ya * p->sy + p->by) * p->in_w + ox * p->sx + p->bx + j0 * p->ex;
                a.w = w_r0 + j0;
                a.y = y_r0 + ya * p->out_w + ox;
                R == 4 ? tile_4x4_v(&a) : tile_1x4_v(&a);
            }
        }
        for (int32_t oy = 0; oy < p->out_h; oy++) {
            if (oy >= ya && oy < ya + v_done) {
                oy = ya + v_done - 1;
                continue;
            }
            int32_t i0, i1;
            span(oy * p->sy + p->by, p->ey, p->kh, p->in_h, &i0, &i1);
            const float *in_row = p->in + (oy * p->sy + p->by + i0 * p->ey) * p->in_w; /* first summed row */
            const float *w_rc = w_r0 + i0 * p->kw;
            float *y_row = y_r0 + oy * p->out_w;
            int32_t ox = xa;
            a.y_m = 1;
            if (!vertical) {
                /* interior columns: blocks of 4, then 2, every tap of the summed rows */
                if (flat) {
                    a.n_c = 1, a.n_rows = 1, a.n_taps = p->n_c;
                    a.x_c = 0, a.x_row = 0, a.x_tap = p->in_c;
                    a.w_tap = p->w_c, a.w_row = 0, a.w_c = 0;
                } else {
                    a.n_c = p->n_c, a.n_rows = i1 - i0, a.n_taps = p->kw;
                    a.x_c = p->in_c, a.x_row = p->ey * p->in_w, a.x_tap = p->ex;
                    a.w_tap = 1, a.w_row = 0, a.w_c = p->w_c - a.n_rows * p->kw;
                }
                a.sx = p->sx;
                a.x = in_row + ox * p->sx + p->bx;
                a.w = w_rc;
                a.y = y_row + ox;
                const int32_t nb = (xb - ox) / 4;
                const int adj = flat && p->w_c != 1; /* bwd 1x1: the R weights of a tap adjacent */
                if (nb > 0 && (R == 4 || (!adj && p->sx == 1))) {
                    a.n_blk = nb, a.x_blk = 4 * p->sx, a.y_blk = 4;
                    if (R == 1) tile_1x4_s1(&a);
                    else if (adj) tile_4x4_adj(&a);
                    else if (p->sx == 1 && p->kw == 3 && (p->ex == 1 || p->ex == -1))
                        p->ex == 1 ? tile_4x4_k3(&a) : tile_4x4_k3r(&a);
                    else if (p->sx == 1) tile_4x4_s1(&a);
                    else if (p->sx == 2) tile_4x4_s2(&a);
                    else a.y_m = 1, tile_4x4_v(&a);
                    ox += 4 * nb;
                }
                if (R == 4 && !adj && xb - ox >= 2 && (p->sx == 1 || p->sx == 2)) {
                    a.n_blk = 1;
                    a.x = in_row + ox * p->sx + p->bx;
                    a.y = y_row + ox;
                    p->sx == 1 ? tile_4x2_s1(&a) : tile_4x2_s2(&a);
                    ox += 2;
                }
            }
            /* Every other output of the row over its own taps. */
            a.n_c = p->n_c, a.n_rows = i1 - i0, a.n_blk = 1;
            a.x_c = p->in_c, a.x_row = p->ey * p->in_w, a.x_tap = p->ex;
            a.w_tap = 1, a.w_c = p->w_c - a.n_rows * p->kw;
            for (int32_t oc = 0; oc < p->out_w; oc++) {
                if (oc >= xa && oc < ox) {
                    oc = ox - 1;
                    continue;
                }
                int32_t j0, j1;
                span(oc * p->sx + p->bx, p->ex, p->kw, p->in_w, &j0, &j1);
                a.n_taps = j1 - j0;
                a.w_row = p->kw - a.n_taps;
                a.x = in_row + oc * p->sx + p->bx + j0 * p->ex;
                a.w = w_rc + j0;
                a.y = y_row + oc;
                R == 4 ? tile_4x1(&a) : tile_1x1(&a);
            }
        }
        r += R;
    }
}

/* ---- depthwise 3x3, stride 1 ------------------------------------------------------------
 * One channel: out[oy][ox] = bias + sum_{i, j < 3} k[i][j] * in[oy + by + i][ox + bx + j]
 * over the taps inside the input. A row's columns split into interior ones (all 3 taps
 * inside: blocks of 4, 2, 1 read from one segment per input row) and edge ones: EDGE_L
 * (tap 0 outside, the left column of a padded row), EDGE_R (tap 2 outside) and EDGE_ANY
 * (any other pattern: each input tested). */
enum { EDGE_NONE, EDGE_L, EDGE_R, EDGE_ANY };

typedef struct dw3_args {
    const float *in;
    int32_t in_h, in_w;
    float k[9];
    float bias;
    float *out;
    int32_t out_h, out_w;
    int32_t by, bx;
} dw3_args;

/* v[t] = row[col + t] for t < N, as the edge kind allows (0 for a tap outside). */
TILE void seg_load(const int N, const int edge, const float *row, int32_t col, int32_t w, float *v)
{
    UNROLL
    for (int t = 0; t < N; t++) {
        if ((edge == EDGE_L && t == 0) || (edge == EDGE_R && t == N - 1)) v[t] = 0.0f;
        else if (edge == EDGE_ANY) v[t] = (uint32_t)(col + t) < (uint32_t)w ? row[col + t] : 0.0f;
        else v[t] = row[col + t];
    }
}

/* The kind of column whose 3 taps start at input column col. */
static inline int edge_kind(int32_t col, int32_t in_w)
{
    if (col >= 0 && col + 3 <= in_w) return EDGE_NONE;
    if (col == -1 && in_w >= 2) return EDGE_L;
    if (col >= 0 && col == in_w - 2) return EDGE_R;
    return EDGE_ANY;
}

/* C outputs of one row from column ox; rows[i] NULL where the input row is outside. */
TILE void dw3_block(const int C, const int edge, const dw3_args *a, const float *k, const float *const rows[3],
                    int32_t ox, float *y)
{
    float acc[4];
    UNROLL
    for (int m = 0; m < C; m++) acc[m] = a->bias;
    const int32_t col = ox + a->bx;
    UNROLL
    for (int i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        float sg[6];
        seg_load(C + 2, edge, rows[i], col, a->in_w, sg);
        const float k0 = k[3 * i], k1 = k[3 * i + 1], k2 = k[3 * i + 2];
        UNROLL
        for (int m = 0; m < C; m++) {
            if (edge != EDGE_L) acc[m] += k0 * sg[m];
            acc[m] += k1 * sg[m + 1];
            if (edge != EDGE_R) acc[m] += k2 * sg[m + 2];
        }
    }
    UNROLL
    for (int m = 0; m < C; m++) y[m] = acc[m];
}

/* C outputs down one column from row oy (rows oy + by .. oy + by + C + 1 all inside):
 * the 3 taps of an input row are neighbours in memory, so each input row is one load
 * per tap column inside the input. */
TILE void dw3v_block(const int C, const int edge, const dw3_args *a, const float *k, int32_t oy, int32_t ox,
                     float *y)
{
    float acc[4];
    UNROLL
    for (int m = 0; m < C; m++) acc[m] = a->bias;
    const float *p = a->in + (oy + a->by) * a->in_w + ox + a->bx + 1; /* tap 1 of the first row */
    UNROLL
    for (int t = 0; t < C + 2; t++) {
        const float l = edge == EDGE_L ? 0.0f : p[-1], c = p[0], r = edge == EDGE_R ? 0.0f : p[1];
        p += a->in_w;
        UNROLL
        for (int m = 0; m < C; m++) {
            const int i = t - m; /* kernel row of input row t for output m */
            if (i < 0 || i > 2) continue;
            if (edge != EDGE_L) acc[m] += k[3 * i] * l;
            acc[m] += k[3 * i + 1] * c;
            if (edge != EDGE_R) acc[m] += k[3 * i + 2] * r;
        }
    }
    UNROLL
    for (int m = 0; m < C; m++) y[m * a->out_w] = acc[m];
}

/* Interior columns and rows of a depthwise 3x3 plane: [*xa, *xb) x [*ya, *yb). */
static void dw3_interior(int32_t out_w, int32_t out_h, int32_t bx, int32_t by, int32_t in_w, int32_t in_h,
                         int32_t *xa, int32_t *xb, int32_t *ya, int32_t *yb)
{
    int32_t t0, t1;
    span(bx, 1, out_w, in_w, &t0, &t1); /* tap 0 inside */
    *xa = t0;
    span(bx + 2, 1, out_w, in_w, &t0, &t1); /* tap 2 inside */
    *xb = t1 > *xa ? t1 : *xa;
    span(by, 1, out_h, in_h, &t0, &t1);
    *ya = t0;
    span(by + 2, 1, out_h, in_h, &t0, &t1);
    *yb = t1 > *ya ? t1 : *ya;
}

static NOINLINE void dw3_run(const dw3_args *a)
{
    float k[9];
    UNROLL
    for (int t = 0; t < 9; t++) k[t] = a->k[t];
    int32_t xa, xb, ya, yb;
    dw3_interior(a->out_w, a->out_h, a->bx, a->by, a->in_w, a->in_h, &xa, &xb, &ya, &yb);
    (void)xa, (void)xb;
    /* Rows [ya, v1) down the columns, 4 or 2 at a time; every other output alone. */
    const int32_t v1 = ya + (yb - ya) / 2 * 2;
    for (int32_t ox = 0; ox < a->out_w; ox++) {
        const int e = edge_kind(ox + a->bx, a->in_w);
        for (int32_t oy = ya; oy < v1 && e != EDGE_ANY;) {
            float *y = a->out + oy * a->out_w + ox;
            if (v1 - oy >= 4) {
                e == EDGE_L ? dw3v_block(4, EDGE_L, a, k, oy, ox, y) : e == EDGE_R ? dw3v_block(4, EDGE_R, a, k, oy, ox, y)
                                                                    : dw3v_block(4, EDGE_NONE, a, k, oy, ox, y);
                oy += 4;
            } else {
                e == EDGE_L ? dw3v_block(2, EDGE_L, a, k, oy, ox, y) : e == EDGE_R ? dw3v_block(2, EDGE_R, a, k, oy, ox, y)
                                                                    : dw3v_block(2, EDGE_NONE, a, k, oy, ox, y);
                oy += 2;
            }
        }
    }
    const int any = edge_kind(a->bx, a->in_w) == EDGE_ANY || edge_kind(a->out_w - 1 + a->bx, a->in_w) == EDGE_ANY;
    for (int32_t oy = 0; oy < a->out_h; oy++) {
        const int down = oy >= ya && oy < v1; /* only EDGE_ANY columns are left in this row */
        if (down && !any) {
            oy = v1 - 1;
            continue;
        }
        const float *rows[3];
        for (int i = 0; i < 3; i++) {
            const int32_t iy = oy + a->by + i;
            rows[i] = (iy >= 0 && iy < a->in_h) ? a->in + iy * a->in_w : 0;
        }
        float *y = a->out + oy * a->out_w;
        for (int32_t ox = 0; ox < a->out_w; ox++) {
            const int e = edge_kind(ox + a->bx, a->in_w);
            if (down && e != EDGE_ANY) continue;
            if (e == EDGE_NONE) dw3_block(1, EDGE_NONE, a, k, rows, ox, y + ox);
            else if (e == EDGE_L) dw3_block(1, EDGE_L, a, k, rows, ox, y + ox);
            else if (e == EDGE_R) dw3_block(1, EDGE_R, a, k, rows, ox, y + ox);
            else dw3_block(1, EDGE_ANY, a, k, rows, ox, y + ox);
        }
    }
}

/* Depthwise 3x3 stride 1 through dw3_run when the correlation is one (n_r = n_c = 1);
 * taps running backwards (the input gradient) are the forward's with the kernel flipped. */
static int dw3_corr(const corr *p)
{
    if (p->n_r != 1 || p->n_c != 1 || p->kh != 3 || p->kw != 3 || p->sy != 1 || p->sx != 1)
        return 0;
    if (!((p->ey == 1 && p->ex == 1) || (p->ey == -1 && p->ex == -1))) return 0;
    dw3_args a;
    const int flip = p->ey < 0;
    UNROLL
    for (int t = 0; t < 9; t++) a.k[t] = p->w[flip ? 8 - t : t];
    a.in = p->in;
    a.in_h = p->in_h;
    a.in_w = p->in_w;
    a.bias = p->bias ? p->bias[0] : 0.0f;
    a.out = p->out;
    a.out_h = p->out_h;
    a.out_w = p->out_w;
    a.by = flip ? p->by - 2 : p->by;
    a.bx = flip ? p->bx - 2 : p->bx;
    dw3_run(&a);
    return 1;
}

/* A 1x1 convolution with stride 1 and no padding over whole planes: one row of h * w. */
static void corr_flat(corr *p)
{
    if (p->kh == 1 && p->kw == 1 && p->sy == 1 && p->sx == 1 && p->by == 0 && p->bx == 0 &&
        p->in_h == p->out_h && p->in_w == p->out_w) {
        p->in_w = p->out_w = p->in_h * p->in_w;
        p->in_h = p->out_h = 1;
    }
}

void poet_conv2d_fwd(const poet_conv2d_shape *s, const float *x, const float *w, const float *bias, float *y)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in, khkw = s->kh * s->kw;
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t g = 0; g < s->groups; g++) {
            corr p;
            p.in = x + (n * s->c_in + g * cin_g) * in_plane;
            p.in_c = in_plane;
            p.in_h = s->h_in;
            p.in_w = s->w_in;
            p.w = w + g * cout_g * cin_g * khkw;
            p.w_r = cin_g * khkw;
            p.w_c = khkw;
            p.n_r = cout_g;
            p.n_c = cin_g;
            p.kh = s->kh;
            p.kw = s->kw;
            p.sy = s->stride_h;
            p.sx = s->stride_w;
            p.by = -s->pad_h;
            p.bx = -s->pad_w;
            p.ey = s->dil_h;
            p.ex = s->dil_w;
            p.out = y + (n * s->c_out + g * cout_g) * out_plane;
            p.out_h = s->h_out;
            p.out_w = s->w_out;
            p.bias = bias ? bias + g * cout_g : 0;
            corr_flat(&p);
            if (!dw3_corr(&p)) corr_run(&p);
        }
    }
}

/* The input gradient of a strided convolution: every (output, tap) pair the forward
 * read adds weight * dy to the input element it read (zeroed first). */
static void bwd_input_scatter(const poet_conv2d_shape *s, const float *dy, const float *w, float *dx)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in;
    const int32_t dx_count = s->n * s->c_in * in_plane;
    for (int32_t k = 0; k < dx_count; k++) dx[k] = 0.0f;
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t co = 0; co < s->c_out; co++) {
            const int32_t g = co / cout_g;
            const float *dyc = dy + (n * s->c_out + co) * out_plane;
            for (int32_t cl = 0; cl < cin_g; cl++) {
                float *dxc = dx + (n * s->c_in + g * cin_g + cl) * in_plane;
                const float *wk = w + (co * cin_g + cl) * s->kh * s->kw;
                for (int32_t i = 0; i < s->kh; i++) {
                    int32_t oh0, oh1;
                    span(i * s->dil_h - s->pad_h, s->stride_h, s->h_out, s->h_in, &oh0, &oh1);
                    for (int32_t j = 0; j < s->kw; j++) {
                        int32_t ow0, ow1;
                        span(j * s->dil_w - s->pad_w, s->stride_w, s->w_out, s->w_in, &ow0, &ow1);
                        const float wv = wk[i * s->kw + j];
                        for (int32_t oh = oh0; oh < oh1; oh++) {
                            float *dxr = dxc + (oh * s->stride_h - s->pad_h + i * s->dil_h) * s->w_in;
                            const float *dyr = dyc + oh * s->w_out;
                            for (int32_t ow = ow0; ow < ow1; ow++)
                                dxr[ow * s->stride_w - s->pad_w + j * s->dil_w] += wv * dyr[ow];
                        }
                    }
                }
            }
        }
    }
}

void poet_conv2d_bwd_input(const poet_conv2d_shape *s, const float *dy, const float *w, float *dx)
{
    if (s->stride_h != 1 || s->stride_w != 1) {
        bwd_input_scatter(s, dy, w, dx);
        return;
    }
    /* dx[ci][y][x] = sum_{co, i, j} w[co][ci][i][j] * dy[co][y + ph - i*dh][x + pw - j*dw] */
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in, khkw = s->kh * s->kw;
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t g = 0; g < s->groups; g++) {
            corr p;
            p.in = dy + (n * s->c_out + g * cout_g) * out_plane;
            p.in_c = out_plane;
            p.in_h = s->h_out;
            p.in_w = s->w_out;
            p.w = w + g * cout_g * cin_g * khkw;
            p.w_r = khkw;
            p.w_c = cin_g * khkw;
            p.n_r = cin_g;
            p.n_c = cout_g;
            p.kh = s->kh;
            p.kw = s->kw;
            p.sy = 1;
            p.sx = 1;
            p.by = s->pad_h;
            p.bx = s->pad_w;
            p.ey = -s->dil_h;
            p.ex = -s->dil_w;
            p.out = dx + (n * s->c_in + g * cin_g) * in_plane;
            p.out_h = s->h_in;
            p.out_w = s->w_in;
            p.bias = 0;
            corr_flat(&p);
            if (!dw3_corr(&p)) corr_run(&p);
        }
    }
}

/* ---- weight gradient ---------------------------------------------------------------------
 * dw[co][ci][i][j] = sum_{n, oy, ox} dy[n][co][oy][ox] * x[n][ci][oy*sh - ph + i*dh][ox*sw - pw + j*dw] */

/* 4 output channels x 4 input channels at one tap, over rows [oy0, oy1) x columns
 * [ox0, ox1) of every sample (where the tap is inside the input). */
typedef struct wgrad_args {
    const float *dy, *x;      /* (n = 0, co or ci = 0, first position) */
    int32_t dy_c, x_c;        /* between channels' planes */
    int32_t dy_n, x_n;        /* between samples */
    int32_t dy_row, x_row;    /* between rows of positions */
    int32_t x_col;            /* input elements between neighbouring positions (the stride) */
    int32_t n, rows, cols;
    float *dw;                /* dw of (co = 0, ci = 0) at this tap */
    int32_t dw_co, dw_ci;     /* between output channels, input channels */
} wgrad_args;

TILE void wgrad_cc(const int S, const wgrad_args *a)
{
    float acc[4][4];
    UNROLL
    for (int r = 0; r < 4; r++)
        UNROLL
        for (int m = 0; m < 4; m++) acc[r][m] = 0.0f;
    const int32_t dc = a->dy_c, xc = a->x_c, sx = S ? S : a->x_col;
    for (int32_t n = 0; n < a->n; n++) {
        for (int32_t oy = 0; oy < a->rows; oy++) {
            const float *d0 = a->dy + n * a->dy_n + oy * a->dy_row, *d1 = d0 + dc, *d2 = d1 + dc, *d3 = d2 + dc;
            const float *x0 = a->x + n * a->x_n + oy * a->x_row, *x1 = x0 + xc, *x2 = x1 + xc, *x3 = x2 + xc;
            for (int32_t k = a->cols; k > 0; k--) {
                const float v0 = *x0, v1 = *x1, v2 = *x2, v3 = *x3;
                x0 += sx, x1 += sx, x2 += sx, x3 += sx;
                float d = *d0++;
                acc[0][0] += d * v0, acc[0][1] += d * v1, acc[0][2] += d * v2, acc[0][3] += d * v3;
                d = *d1++;
                acc[1][0] += d * v0, acc[1][1] += d * v1, acc[1][2] += d * v2, acc[1][3] += d * v3;
                d = *d2++;
                acc[2][0] += d * v0, acc[2][1] += d * v1, acc[2][2] += d * v2, acc[2][3] += d * v3;
                d = *d3++;
                acc[3][0] += d * v0, acc[3][1] += d * v1, acc[3][2] += d * v2, acc[3][3] += d * v3;
            }
        }
    }
    UNROLL
    for (int r = 0; r < 4; r++)
        UNROLL
        for (int m = 0; m < 4; m++) a->dw[r * a->dw_co + m * a->dw_ci] = acc[r][m];
}

static NOINLINE void wgrad_cc_s1(const wgrad_args *a) { wgrad_cc(1, a); }
static NOINLINE void wgrad_cc_sn(const wgrad_args *a) { wgrad_cc(0, a); }

/* 4 output channels x T neighbouring taps (j0 .. j0+T-1, dilation 1) of one input
 * channel and kernel row, over rows [0, rows) x columns [0, cols) of positions; x is at
 * tap j0 of the first position. Taps outside the input read 0 in the columns before
 * `lo` and from `hi` on, where some of the T taps fall outside. */
typedef struct wtaps_args {
    const float *dy, *x;
    int32_t dy_c, dy_n, x_n, dy_row, x_row, x_col;
    int32_t n, rows, cols, lo, hi;
    int32_t ix0, in_w; /* input column of tap j0 at the first position; the input's width */
    float *dw;         /* dw of (co = 0, tap j0) */
    int32_t dw_co;
} wtaps_args;

TILE void wtaps(const int T, const wtaps_args *a)
{
    float acc[4][4];
    UNROLL
    for (int r = 0; r < 4; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
    const int32_t dc = a->dy_c, sx = a->x_col;
    for (int32_t n = 0; n < a->n; n++) {
        for (int32_t oy = 0; oy < a->rows; oy++) {
            const float *d0 = a->dy + n * a->dy_n + oy * a->dy_row, *d1 = d0 + dc, *d2 = d1 + dc, *d3 = d2 + dc;
            const float *xp = a->x + n * a->x_n + oy * a->x_row;
            for (int32_t k = 0; k < a->cols; k++, xp += sx) {
                float v[4];
                if (k >= a->lo && k < a->hi) {
                    UNROLL
                    for (int t = 0; t < T; t++) v[t] = xp[t];
                } else {
                    const int32_t col = a->ix0 + k * sx;
                    UNROLL
                    for (int t = 0; t < T; t++) v[t] = (uint32_t)(col + t) < (uint32_t)a->in_w ? xp[t] : 0.0f;
                }
                float d = *d0++;
                UNROLL
                for (int t = 0; t < T; t++) acc[0][t] += d * v[t];
                d = *d1++;
                UNROLL
                for (int t = 0; t < T; t++) acc[1][t] += d * v[t];
                d = *d2++;
                UNROLL
                for (int t = 0; t < T; t++) acc[2][t] += d * v[t];
                d = *d3++;
                UNROLL
                for (int t = 0; t < T; t++) acc[3][t] += d * v[t];
            }
        }
    }
    UNROLL
    for (int r = 0; r < 4; r++)
        UNROLL
        for (int t = 0; t < T; t++) a->dw[r * a->dw_co + t] = acc[r][t];
}

static NOINLINE void wtaps_4(const wtaps_args *a) { wtaps(4, a); }
static NOINLINE void wtaps_3(const wtaps_args *a) { wtaps(3, a); }

/* One dw element: the plain dot product of the definition. */
static float wgrad_one(const poet_conv2d_shape *s, const float *dy, const float *x, int32_t co, int32_t ci,
                       int32_t i, int32_t j)
{
    int32_t oh0, oh1, ow0, ow1;
    span(i * s->dil_h - s->pad_h, s->stride_h, s->h_out, s->h_in, &oh0, &oh1);
    span(j * s->dil_w - s->pad_w, s->stride_w, s->w_out, s->w_in, &ow0, &ow1);
    float acc = 0.0f;
    for (int32_t n = 0; n < s->n; n++) {
        const float *dyc = dy + (n * s->c_out + co) * s->h_out * s->w_out;
        const float *xc = x + (n * s->c_in + ci) * s->h_in * s->w_in;
        for (int32_t oh = oh0; oh < oh1; oh++) {
            const float *dyr = dyc + oh * s->w_out;
            const float *xr = xc + (oh * s->stride_h - s->pad_h + i * s->dil_h) * s->w_in - s->pad_w + j * s->dil_w;
            for (int32_t ow = ow0; ow < ow1; ow++) acc += dyr[ow] * xr[ow * s->stride_w];
        }
    }
    return acc;
}

/* Depthwise 3x3 stride 1: the 9 weight gradients of one channel, as dw3_run: interior
 * columns 4, 2 or 1 at a time, edge columns by their kind. */
typedef struct dw3w_args {
    const float *dy, *x;
    int32_t dy_n, x_n; /* elements between samples */
    int32_t n, h, w;   /* the input plane */
    int32_t h_out, w_out, by, bx;
    float *dw;
} dw3w_args;

TILE void dw3w_block(const int C, const int edge, const dw3w_args *a, const float *const rows[3],
                     const float *dyr, int32_t ox, float acc[9])
{
    float d[4];
    UNROLL
    for (int m = 0; m < C; m++) d[m] = dyr[ox + m];
    const int32_t col = ox + a->bx;
    UNROLL
    for (int i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        float v[6];
        seg_load(C + 2, edge, rows[i], col, a->w, v);
        UNROLL
        for (int m = 0; m < C; m++) {
            if (edge != EDGE_L) acc[3 * i] += d[m] * v[m];
            acc[3 * i + 1] += d[m] * v[m + 1];
            if (edge != EDGE_R) acc[3 * i + 2] += d[m] * v[m + 2];
        }
    }
}

/* C positions down one column from row oy (all their input rows inside). */
TILE void dw3wv_block(const int C, const int edge, const dw3w_args *a, const float *xn, const float *dyn, int32_t oy,
                      int32_t ox, float acc[9])
{
    float d[4];
    UNROLL
    for (int m = 0; m < C; m++) d[m] = dyn[(oy + m) * a->w_out + ox];
    const float *p = xn + (oy + a->by) * a->w + ox + a->bx + 1;
    UNROLL
    for (int t = 0; t < C + 2; t++) {
        const float l = edge == EDGE_L ? 0.0f : p[-1], c = p[0], r = edge == EDGE_R ? 0.0f : p[1];
        p += a->w;
        UNROLL
        for (int m = 0; m < C; m++) {
            const int i = t - m;
            if (i < 0 || i > 2) continue;
            if (edge != EDGE_L) acc[3 * i] += d[m] * l;
            acc[3 * i + 1] += d[m] * c;
            if (edge != EDGE_R) acc[3 * i + 2] += d[m] * r;
        }
    }
}

static NOINLINE void dw3w_run(const dw3w_args *a)
{
    float acc[9];
    UNROLL
    for (int t = 0; t < 9; t++) acc[t] = 0.0f;
    int32_t xa, xb, ya, yb;
    dw3_interior(a->w_out, a->h_out, a->bx, a->by, a->w, a->h, &xa, &xb, &ya, &yb);
    (void)xa, (void)xb;
    const int32_t v1 = ya + (yb - ya) / 2 * 2;
    const int any = edge_kind(a->bx, a->w) == EDGE_ANY || edge_kind(a->w_out - 1 + a->bx, a->w) == EDGE_ANY;
    /* Sample by sample: rows [ya, v1) down the columns, then every other position alone. */
    for (int32_t n = 0; n < a->n; n++) {
        const float *xn = a->x + n * a->x_n, *dyn = a->dy + n * a->dy_n;
        for (int32_t ox = 0; ox < a->w_out; ox++) {
            const int e = edge_kind(ox + a->bx, a->w);
            for (int32_t oy = ya; oy < v1 && e != EDGE_ANY;) {
                if (v1 - oy >= 4) {
                    e == EDGE_L ? dw3wv_block(4, EDGE_L, a, xn, dyn, oy, ox, acc)
                        : e == EDGE_R ? dw3wv_block(4, EDGE_R, a, xn, dyn, oy, ox, acc)
                                      : dw3wv_block(4, EDGE_NONE, a, xn, dyn, oy, ox, acc);
                    oy += 4;
                } else {
                    e == EDGE_L ? dw3wv_block(2, EDGE_L, a, xn, dyn, oy, ox, acc)
                        : e == EDGE_R ? dw3wv_block(2, EDGE_R, a, xn, dyn, oy, ox, acc)
                                      : dw3wv_block(2, EDGE_NONE, a, xn, dyn, oy, ox, acc);
                    oy += 2;
                }
            }
        }
        for (int32_t oy = 0; oy < a->h_out; oy++) {
            const int down = oy >= ya && oy < v1;
            if (down && !any) {
                oy = v1 - 1;
                continue;
            }
            const float *rows[3];
            for (int i = 0; i < 3; i++) {
                const int32_t iy = oy + a->by + i;
                rows[i] = (iy >= 0 && iy < a->h) ? xn + iy * a->w : 0;
            }
            const float *dyr = dyn + oy * a->w_out;
            for (int32_t ox = 0; ox < a->w_out; ox++) {
                const int e = edge_kind(ox + a->bx, a->w);
                if (down && e != EDGE_ANY) continue;
                if (e == EDGE_NONE) dw3w_block(1, EDGE_NONE, a, rows, dyr, ox, acc);
                else if (e == EDGE_L) dw3w_block(1, EDGE_L, a, rows, dyr, ox, acc);
                else if (e == EDGE_R) dw3w_block(1, EDGE_R, a, rows, dyr, ox, acc);
                else dw3w_block(1, EDGE_ANY, a, rows, dyr, ox, acc);
            }
        }
    }
    UNROLL
    for (int t = 0; t < 9; t++) a->dw[t] = acc[t];
}

void poet_conv2d_bwd_weight(const poet_conv2d_shape *s, const float *dy, const float *x, float *dw)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in, khkw = s->kh * s->kw;
    const int32_t co_full = cout_g / 4 * 4; /* channels in blocks of 4; the rest by wgrad_one */
    for (int32_t g = 0; g < s->groups; g++) {
        const int32_t co_g = g * cout_g, ci_g = g * cin_g;
        if (cin_g == 1 && cout_g == 1 && s->kh == 3 && s->kw == 3 && s->stride_h == 1 && s->stride_w == 1 &&
            s->dil_h == 1 && s->dil_w == 1) {
            dw3w_args a;
            a.dy = dy + co_g * out_plane;
            a.x = x + ci_g * in_plane;
            a.dy_n = s->c_out * out_plane;
            a.x_n = s->c_in * in_plane;
            a.n = s->n;
            a.h = s->h_in;
            a.w = s->w_in;
            a.h_out = s->h_out;
            a.w_out = s->w_out;
            a.by = -s->pad_h;
            a.bx = -s->pad_w;
            a.dw = dw + co_g * 9;
            dw3w_run(&a);
            continue;
        }
        const int32_t ci_full = cin_g / 4 * 4;
        /* 4 x 4 channel blocks, one tap at a time. */
        for (int32_t i = 0; i < s->kh; i++) {
            int32_t oh0, oh1;
            span(i * s->dil_h - s->pad_h, s->stride_h, s->h_out, s->h_in, &oh0, &oh1);
            for (int32_t j = 0; j < s->kw; j++) {
                int32_t ow0, ow1;
                span(j * s->dil_w - s->pad_w, s->stride_w, s->w_out, s->w_in, &ow0, &ow1);
                wgrad_args a;
                a.dy_c = out_plane;
                a.x_c = in_plane;
                a.dy_n = s->c_out * out_plane;
                a.x_n = s->c_in * in_plane;
                a.dy_row = s->w_out;
                a.x_row = s->stride_h * s->w_in;
                a.x_col = s->stride_w;
                a.n = s->n;
                a.rows = oh1 - oh0;
                a.cols = ow1 - ow0;
                a.dw_co = cin_g * khkw;
                a.dw_ci = khkw;
                const int32_t iy = oh0 * s->stride_h - s->pad_h + i * s->dil_h;
                const int32_t ix = ow0 * s->stride_w - s->pad_w + j * s->dil_w;
                /* A 1x1 tap over whole planes is one row of positions. */
                if (a.rows == s->h_out && a.cols == s->w_out && a.rows == s->h_in && a.cols == s->w_in &&
                    s->stride_h == 1 && s->stride_w == 1) {
                    a.cols *= a.rows;
                    a.rows = 1;
                }
                for (int32_t co = 0; co < co_full; co += 4) {
                    for (int32_t ci = 0; ci < ci_full; ci += 4) {
                        a.dy = dy + (co_g + co) * out_plane + oh0 * s->w_out + ow0;
                        a.x = x + (ci_g + ci) * in_plane + iy * s->w_in + ix;
                        a.dw = dw + ((co_g + co) * cin_g + ci) * khkw + i * s->kw + j;
                        if (s->stride_w == 1) wgrad_cc_s1(&a);
                        else wgrad_cc_sn(&a);
                    }
                }
            }
        }
        /* Input channels left over: 4 output channels x 4 or 3 neighbouring taps. */
        for (int32_t ci = ci_full; ci < cin_g; ci++) {
            for (int32_t i = 0; i < s->kh; i++) {
                int32_t oh0, oh1;
                span(i * s->dil_h - s->pad_h, s->stride_h, s->h_out, s->h_in, &oh0, &oh1);
                int32_t j = 0;
                for (; s->dil_w == 1 && co_full > 0 && j + 3 <= s->kw; ) {
                    const int T = s->kw - j >= 4 ? 4 : 3;
                    /* positions [u0, u1) where some tap is inside, [c0, c1) where all are */
                    int32_t u0 = s->w_out, u1 = 0, c0 = 0, c1 = s->w_out;
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        int32_t t0, t1;
                        span(j + t - s->pad_w, s->stride_w, s->w_out, s->w_in, &t0, &t1);
                        if (t0 < t1) u0 = t0 < u0 ? t0 : u0, u1 = t1 > u1 ? t1 : u1;
                        c0 = t0 > c0 ? t0 : c0;
                        c1 = t1 < c1 ? t1 : c1;
                    }
                    if (u1 < u0) u1 = u0;
                    wtaps_args a;
                    a.dy_c = out_plane;
                    a.dy_n = s->c_out * out_plane;
                    a.x_n = s->c_in * in_plane;
                    a.dy_row = s->w_out;
                    a.x_row = s->stride_h * s->w_in;
                    a.x_col = s->stride_w;
                    a.n = s->n;
                    a.rows = oh1 - oh0;
                    a.cols = u1 - u0;
                    a.lo = c0 - u0;
                    a.hi = c1 - u0;
                    a.ix0 = u0 * s->stride_w - s->pad_w + j;
                    a.in_w = s->w_in;
                    a.dw_co = cin_g * khkw;
                    for (int32_t co = 0; co < co_full; co += 4) {
                        a.dy = dy + (co_g + co) * out_plane + oh0 * s->w_out + u0;
                        a.x = x + (ci_g + ci) * in_plane + (oh0 * s->stride_h - s->pad_h + i * s->dil_h) * s->w_in + a.ix0;
                        a.dw = dw + ((co_g + co) * cin_g + ci) * khkw + i * s->kw + j;
                        if (T == 4) wtaps_4(&a);
                        else wtaps_3(&a);
                    }
                    j += T;
                }
                for (; j < s->kw; j++)
                    for (int32_t co = 0; co < co_full; co++)
                        dw[((co_g + co) * cin_g + ci) * khkw + i * s->kw + j] =
                            wgrad_one(s, dy, x, co_g + co, ci_g + ci, i, j);
            }
        }
        /* Output channels left over: one element at a time. */
        for (int32_t co = co_full; co < cout_g; co++)
            for (int32_t ci = 0; ci < cin_g; ci++)
                for (int32_t i = 0; i < s->kh; i++)
                    for (int32_t j = 0; j < s->kw; j++)
                        dw[((co_g + co) * cin_g + ci) * khkw + i * s->kw + j] =
                            wgrad_one(s, dy, x, co_g + co, ci_g + ci, i, j);
    }
}

void poet_conv2d_bwd_bias(const poet_conv2d_shape *s, const float *dy, float *db)
{
    const int32_t plane = s->h_out * s->w_out;
    for (int32_t co = 0; co < s->c_out; co++) {
        /* four running sums, added pairwise at the end */
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (int32_t n = 0; n < s->n; n++) {
            const float *p = dy + (n * s->c_out + co) * plane;
            int32_t k = 0;
            for (; k + 4 <= plane; k += 4, p += 4) a0 += p[0], a1 += p[1], a2 += p[2], a3 += p[3];
            for (; k < plane; k++) a0 += *p++;
        }
        db[co] = (a0 + a1) + (a2 + a3);
    }
}
