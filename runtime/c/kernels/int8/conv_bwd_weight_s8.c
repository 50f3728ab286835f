/* conv_bwd_weight_s8.c - int8 convolution and linear weight and bias gradients
 * (docs/int8.md, "Weight and bias gradients").
 *
 * GW[c, k] = sum over positions of g[c] * (x_k - z_x), Gb[c] = sum of g[c], in int32
 * (wrap), for the output channels [co_begin, co_end). The positions are taken a chunk at
 * a time: whole output rows of one sample (S8_ROW positions at most; a longer row in
 * pieces). For a chunk, the gradient rows of the channels (A) and the input each tap
 * reads at those positions (B, one row per tap, 0 at padding) are int16 rows of S8_ROW,
 * and the tile of s8_tiles_rows sums a pair of channels against a pair of taps: per quad
 * of positions four LDRD and eight SMLAD, the sums carried in gw from chunk to chunk.
 * The input rows a chunk reads are widened once into a band with its padding, so a
 * tap's row is a copy (stride 1: contiguous int16) and no bound is tested per element.
 * A linear layer's positions are its samples. Depthwise layers run conv_dw_s8.c. */
#include "s8_conv.h"

typedef struct wgrad_geom {
    int32_t cin_g, cout_g, k;
    int32_t linear;         /* one position per sample: the chunk runs over samples */
    int32_t pointwise;      /* 1x1, stride 1, no padding: a tap's row is the input's */
    int32_t rows, cols;     /* a chunk: rows output rows of cols positions (one piece of a row if long) */
    int32_t phase_rows;     /* rows per phase plane */
} wgrad_geom;

static wgrad_geom wgrad_geometry(const poet_s8_conv_shape *s)
{
    wgrad_geom g;
    g.cin_g = s->c_in / s->groups;
    g.cout_g = s->c_out / s->groups;
    g.k = g.cin_g * s->kh * s->kw;
    g.linear = s->h_out * s->w_out == 1 && s->kh == 1 && s->kw == 1 && s->h_in == 1 && s->w_in == 1;
    g.pointwise = s->kh == 1 && s->kw == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_top == 0 &&
                  s->pad_left == 0 && s->h_in == s->h_out && s->w_in == s->w_out;
    g.cols = s8_min(s->w_out, S8_ROW);
    g.rows = s8_max(1, s8_min(s->h_out, S8_ROW / g.cols));
    g.phase_rows = g.rows - 1 + (s->kh + s->stride_h - 1) / s->stride_h;
    return g;
}

S8_INLINE int32_t a_bytes(const wgrad_geom *g) { return s8_ws_part(2 * S8_ROW * s8_round2(g->cout_g)); }

/* The B sources: two rows (pointwise, linear) or the phase planes, and a slack the tile
 * may read past a row's end (A is 0 there). */
static int32_t b_bytes(const poet_s8_conv_shape *s, const wgrad_geom *g)
{
    if (g->linear || g->pointwise)
        return s8_ws_part(2 * 2 * S8_ROW);
    return s8_ws_part(2 * (g->cin_g * s->kw * s->stride_h * g->phase_rows * g->cols + 8));
}

int32_t poet_s8_conv_bwd_weight_ws(const poet_s8_conv_shape *s)
{
    if (s8_is_depthwise(s))
        return s8_dw_wgrad_ws(s);
    wgrad_geom g = wgrad_geometry(s);
    return a_bytes(&g) + b_bytes(s, &g) + s8_ws_part(8 * s8_round2(g.cout_g));
}

/* A chunk: sample `sample`, output rows [r0, r0 + nr), columns [c0, c0 + nc); or for a
 * linear layer samples [r0, r0 + nr). */
typedef struct chunk {
    int32_t sample, r0, nr, c0, nc, n; /* n = positions */
} chunk;

/* A rows: the gradient of channels [lo, hi) at the chunk's positions, then zeros to a
 * multiple of 4; Gb accumulates (SMLAD against a pair of ones: the row's sum). */
static void grad_rows(const poet_s8_conv_shape *s, const int8_t *grad, const chunk *ch, int32_t lo, int32_t hi,
                      int32_t linear, int16_t *a, int32_t *gb, int32_t co_begin)
{
    int32_t plane = s->h_out * s->w_out, n4 = s8_round4(ch->n);
    for (int32_t c = lo; c < hi; c++, a += S8_ROW) {
        if (linear) {
            for (int32_t t = 0; t < ch->n; t++) a[t] = grad[(ch->r0 + t) * s->c_out + c];
        } else {
            const int8_t *src = grad + (ch->sample * s->c_out + c) * plane + ch->r0 * s->w_out + ch->c0;
            if (ch->nc == s->w_out) /* whole rows: contiguous */
                s8_widen(a, src, ch->n, 0);
            else
                for (int32_t r = 0; r < ch->nr; r++) s8_widen(a + r * ch->nc, src + r * s->w_out, ch->nc, 0);
        }
        for (int32_t t = ch->n; t < n4; t++) a[t] = 0;
        if (gb) {
            uint32_t sum = (uint32_t)gb[c - co_begin];
            for (int32_t t = 0; t < n4; t += 2) sum = s8_smlad(s8_load32(a + t), 0x00010001u, sum);
            gb[c - co_begin] = (int32_t)sum;
        }
    }
}

/* d[t] = src[2 t] + offset: SXTAB16 picks bytes 0 and 2 of a word. */
static void widen_even(int16_t *d, const int8_t *src, int32_t n, int32_t offset)
{
    uint32_t off2 = s8_pair(offset, offset);
    int32_t t = 0;
    for (; t + 2 <= n; t += 2) s8_store32(d + t, s8_sxtab16(off2, s8_load32(src + 2 * t)));
    for (; t < n; t++) d[t] = (int16_t)(src[2 * t] + offset);
}

/* The phase planes of the chunk: plane (ci, j, ph) row t holds, for each of the chunk's
 * cols columns c, x[ci][r0 sh - pt + ph + t sh][(c0 + c) sw + j - pl] - z_x (0 outside). */
static void fill_phases(const poet_s8_conv_shape *s, const wgrad_geom *g, const int8_t *x, int32_t z_x, int32_t group,
                        const chunk *ch, int16_t *planes)
{
    int32_t plane_in = s->h_in * s->w_in, nc = ch->nc, sw = s->stride_w;
    const int8_t *xs = x + (ch->sample * s->c_in + group * g->cin_g) * plane_in;
    int16_t *d = planes;
    for (int32_t ci = 0; ci < g->cin_g; ci++, xs += plane_in)
        for (int32_t j = 0; j < s->kw; j++) {
            int32_t base = ch->c0 * sw + j - s->pad_left; /* input column of c = 0 */
            int32_t lo = base >= 0 ? 0 : s8_min((-base + sw - 1) / sw, nc);
            int32_t hi = s8_max(lo, s8_min(nc, s->w_in - base > 0 ? (s->w_in - base + sw - 1) / sw : 0));
            for (int32_t ph = 0; ph < s->stride_h; ph++)
                for (int32_t t = 0; t < g->phase_rows; t++, d += nc) {
                    int32_t row = ch->r0 * s->stride_h - s->pad_top + ph + t * s->stride_h;
                    int32_t a = lo, b = hi;
                    if (row < 0 || row >= s->h_in) a = b = 0;
                    for (int32_t c = 0; c < a; c++) d[c] = 0;
                    const int8_t *src = xs + row * s->w_in + base; /* read at c in [a, b) only */
                    if (b > a) {
                        if (sw == 1)
                            s8_widen(d + a, src + a, b - a, -z_x);
                        else if (sw == 2)
                            widen_even(d + a, src + 2 * a, b - a, -z_x);
                        else
                            for (int32_t c = a; c < b; c++) d[c] = (int16_t)(src[c * sw] - z_x);
                    }
                    for (int32_t c = b; c < nc; c++) d[c] = 0;
                }
        }
}

/* Where tap k's B row starts: in the phase planes, or in `rows` after widening it there. */
static const int16_t *tap_row(const poet_s8_conv_shape *s, const wgrad_geom *g, const int8_t *x, int32_t z_x,
                              int32_t group, const int16_t *planes, const chunk *ch, int32_t k, int16_t *rows)
{
    if (g->linear) {
        for (int32_t t = 0; t < ch->n; t++)
            rows[t] = (int16_t)(x[(ch->r0 + t) * s->c_in + group * g->cin_g + k] - z_x);
        return rows;
    }
    if (g->pointwise) {
        const int8_t *src = x + (ch->sample * s->c_in + group * g->cin_g + k) * s->h_in * s->w_in;
        s8_widen(rows, src + ch->r0 * s->w_in + ch->c0, ch->n, -z_x); /* whole rows, or one piece of a row */
        return rows;
    }
    int32_t taps = s->kh * s->kw, ci = k / taps, i = (k % taps) / s->kw, j = k % s->kw;
    int32_t plane = (ci * s->kw + j) * s->stride_h + i % s->stride_h;
    return planes + (plane * g->phase_rows + i / s->stride_h) * ch->nc;
}

/* Every chunk of the positions, in order. Returns 0 when there is none left. */
static int32_t next_chunk(const poet_s8_conv_shape *s, const wgrad_geom *g, chunk *ch)
{
    if (g->linear) {
        ch->r0 += ch->nr;
        ch->nr = ch->n = s8_min(S8_ROW, s->n - ch->r0);
        return ch->r0 < s->n;
    }
    ch->c0 += ch->nc;
    if (ch->c0 >= s->w_out) {
        ch->c0 = 0;
        ch->r0 += ch->nr;
        if (ch->r0 >= s->h_out) {
            ch->r0 = 0;
            ch->sample++;
        }
    }
    if (ch->sample >= s->n)
        return 0;
    ch->nc = s8_min(g->cols, s->w_out - ch->c0);
    ch->nr = ch->nc == s->w_out ? s8_min(g->rows, s->h_out - ch->r0) : 1;
    ch->n = ch->nr * ch->nc;
    return 1;
}

/* gw[(r - co_begin) * K + k .. k + 1] += channels [lo, hi) x taps k, k + 1 over the chunk. */
static void accumulate(const wgrad_geom *g, const int16_t *a, const int16_t *b0, const int16_t *b1, int32_t quads,
                       int32_t lo, int32_t hi, int32_t co_begin, int32_t k, int32_t *gw, uint32_t *scratch)
{
    int32_t pairs = (hi - lo + 1) >> 1;
    if (k + 1 < g->k && !((hi - lo) & 1)) {
        s8_tiles_rows(quads, pairs, a, b0, b1, (uint32_t *)gw + (lo - co_begin) * g->k + k, g->k);
        return;
    }
    /* a lone last tap or channel: through a scratch pair of columns */
    for (int32_t r = lo; r < lo + 2 * pairs; r++)
        for (int32_t t = 0; t < 2; t++)
            scratch[(r - lo) * 2 + t] = r < hi && k + t < g->k ? (uint32_t)gw[(r - co_begin) * g->k + k + t] : 0u;
    s8_tiles_rows(quads, pairs, a, b0, b1, scratch, 2);
    for (int32_t r = lo; r < hi; r++)
        for (int32_t t = 0; t < 2 && k + t < g->k; t++) gw[(r - co_begin) * g->k + k + t] = (int32_t)scratch[(r - lo) * 2 + t];
}

static void depthwise_bias(const poet_s8_conv_shape *s, const int8_t *grad, int32_t co_begin, int32_t co_end, int32_t *gb)
{
    int32_t plane = s->h_out * s->w_out;
    for (int32_t c = co_begin; c < co_end; c++) {
        uint32_t sum = 0;
        for (int32_t b = 0; b < s->n; b++)
            for (int32_t t = 0; t < plane; t++) sum += (uint32_t)(int32_t)grad[(b * s->c_out + c) * plane + t];
        gb[c - co_begin] = (int32_t)sum;
    }
}

void poet_s8_conv_bwd_weight(const poet_s8_conv_shape *s, const int8_t *grad, const int8_t *x, int32_t z_x,
                             int32_t co_begin, int32_t co_end, int32_t *gw, int32_t *gb, void *ws)
{
    if (s8_is_depthwise(s)) {
        if (gb) depthwise_bias(s, grad, co_begin, co_end, gb);
        s8_dw_wgrad(s, grad, x, z_x, co_begin, co_end, gw, ws);
        return;
    }
    wgrad_geom g = wgrad_geometry(s);
    int16_t *a = (int16_t *)ws;
    int16_t *b = (int16_t *)((uint8_t *)ws + a_bytes(&g)); /* two rows, or the phase planes */
    uint32_t *scratch = (uint32_t *)((uint8_t *)b + b_bytes(s, &g));
    for (int32_t i = 0; i < (co_end - co_begin) * g.k; i++) gw[i] = 0;
    if (gb)
        for (int32_t c = 0; c < co_end - co_begin; c++) gb[c] = 0;
    if (s->n <= 0)
        return;
    for (int32_t t = 0; t < (int32_t)(b_bytes(s, &g) / 2); t++) b[t] = 0; /* the slack past the last row */
    chunk ch = {0, 0, 0, 0, 0, 0};
    if (g.linear)
        ch.r0 = 0, ch.nr = ch.n = s8_min(S8_ROW, s->n);
    else
        ch.c0 = -g.cols, ch.nc = g.cols, next_chunk(s, &g, &ch);
    do {
        int32_t quads = s8_round4(ch.n) >> 2;
        for (int32_t group = 0; group < s->groups; group++) {
            int32_t lo = s8_max(co_begin, group * g.cout_g), hi = s8_min(co_end, (group + 1) * g.cout_g);
            if (lo >= hi) continue;
            grad_rows(s, grad, &ch, lo, hi, g.linear, a, gb, co_begin);
            if (hi - lo < s8_round2(hi - lo))
                for (int32_t t = 0; t < S8_ROW; t++) a[(hi - lo) * S8_ROW + t] = 0;
            if (!g.linear && !g.pointwise) fill_phases(s, &g, x, z_x, group, &ch, b);
            for (int32_t k = 0; k < g.k; k += 2) {
                const int16_t *b0 = tap_row(s, &g, x, z_x, group, b, &ch, k, b);
                const int16_t *b1 = k + 1 < g.k ? tap_row(s, &g, x, z_x, group, b, &ch, k + 1, b + S8_ROW) : b0;
                accumulate(&g, a, b0, b1, quads, lo, hi, co_begin, k, gw, scratch);
            }
        }
    } while (next_chunk(s, &g, &ch));
}
