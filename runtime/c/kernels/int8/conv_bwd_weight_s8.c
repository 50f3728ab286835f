/* conv_bwd_weight_s8.c - int8 convolution and linear weight and bias gradients
 * (docs/int8.md, "Weight and bias gradients").
 *
 * GW[c, k] = sum over positions of g[c] * (x_k - z_x), Gb[c] = sum of g[c], in int32
 * (wrap), for the output channels [co_begin, co_end). As packed dot products
 * (s8_gemm.h) the rows are output channels (A: the gradient along positions) and the
 * columns the taps k = (input channel, i, j) (B: the input each position reads through
 * that tap, 0 at padding); K is a chunk of S8_CHUNK positions of the flattened
 * (sample, oh, ow) index, the sums carried in gw from one chunk to the next. Depthwise
 * layers run conv_dw_s8.c. */
#include "s8_conv.h"

#define S8_CHUNK 64

typedef struct wgrad_geom {
    int32_t cin_g, cout_g, k, plane_in, plane_out, total;
} wgrad_geom;

static wgrad_geom wgrad_geometry(const poet_s8_conv_shape *s)
{
    wgrad_geom g = {s->c_in / s->groups, s->c_out / s->groups, 0, s->h_in * s->w_in, s->h_out * s->w_out, 0};
    g.k = g.cin_g * s->kh * s->kw;
    g.total = s->n * g.plane_out;
    return g;
}

int32_t poet_s8_conv_bwd_weight_ws(const poet_s8_conv_shape *s)
{
    if (s8_is_depthwise(s))
        return s8_dw_wgrad_ws(s);
    wgrad_geom g = wgrad_geometry(s);
    return s8_ws_part(2 * s8_round2(g.cout_g) * S8_CHUNK) + s8_ws_part(2 * 2 * S8_CHUNK) + s8_ws_part(4 * 3 * S8_CHUNK);
}

/* Where chunk position t reads: its sample's input (offset of channel 0) and the input
 * row and column of tap (0, 0). */
typedef struct chunk_pos {
    int32_t *base, *row, *col;
} chunk_pos;

static void locate(const poet_s8_conv_shape *s, const wgrad_geom *g, int32_t start, int32_t count, chunk_pos *p)
{
    for (int32_t t = 0; t < count; t++) {
        int32_t j = start + t, b = j / g->plane_out, pos = j % g->plane_out;
        p->base[t] = b * s->c_in * g->plane_in;
        p->row[t] = (pos / s->w_out) * s->stride_h - s->pad_top;
        p->col[t] = (pos % s->w_out) * s->stride_w - s->pad_left;
    }
}

/* A: rows co in [lo, hi) of the gradient at the chunk's positions. */
static void pack_grad_rows(const poet_s8_conv_shape *s, const wgrad_geom *g, const int8_t *grad, int32_t lo,
                           int32_t hi, int32_t start, int32_t count, int16_t *a)
{
    for (int32_t r = 0; r < s8_round2(hi - lo); r++) {
        int16_t *d = a + (r >> 1) * 2 * S8_CHUNK + (r & 1) * 4;
        for (int32_t t = 0; t < s8_round4(count); t++) {
            int32_t v = 0;
            if (lo + r < hi && t < count) {
                int32_t j = start + t;
                v = grad[((j / g->plane_out) * s->c_out + lo + r) * g->plane_out + j % g->plane_out];
            }
            d[s8_slot(t)] = (int16_t)v;
        }
    }
}

/* B: taps k0 and k1 (k1 may be past K: zeros) of group `group` at the chunk's positions. */
static void pack_tap_pair(const poet_s8_conv_shape *s, const wgrad_geom *g, const int8_t *x, int32_t z_x,
                          int32_t group, int32_t k0, const chunk_pos *p, int32_t count, int16_t *b)
{
    int32_t taps = s->kh * s->kw;
    for (int32_t half = 0; half < 2; half++) {
        int32_t k = k0 + half;
        int32_t ci = group * g->cin_g + k / taps, i = (k % taps) / s->kw, j = k % s->kw;
        int16_t *d = b + half * 4;
        for (int32_t t = 0; t < s8_round4(count); t++) {
            int32_t v = 0;
            if (k < g->k && t < count) {
                int32_t r = p->row[t] + i, c = p->col[t] + j;
                if (r >= 0 && r < s->h_in && c >= 0 && c < s->w_in)
                    v = x[p->base[t] + ci * g->plane_in + r * s->w_in + c] - z_x;
            }
            d[s8_slot(t)] = (int16_t)v;
        }
    }
}

static void bias_grad(const poet_s8_conv_shape *s, const int8_t *grad, int32_t c0, int32_t c1, int32_t *gb)
{
    int32_t plane = s->h_out * s->w_out;
    for (int32_t c = c0; c < c1; c++) {
        uint32_t acc = 0;
        for (int32_t b = 0; b < s->n; b++) {
            const int8_t *gp = grad + (b * s->c_out + c) * plane;
            for (int32_t t = 0; t < plane; t++) acc += (uint32_t)(int32_t)gp[t];
        }
        gb[c - c0] = (int32_t)acc;
    }
}

void poet_s8_conv_bwd_weight(const poet_s8_conv_shape *s, const int8_t *grad, const int8_t *x, int32_t z_x,
                             int32_t co_begin, int32_t co_end, int32_t *gw, int32_t *gb, void *ws)
{
    if (gb)
        bias_grad(s, grad, co_begin, co_end, gb);
    if (s8_is_depthwise(s)) {
        s8_dw_wgrad(s, grad, x, z_x, co_begin, co_end, gw, ws);
        return;
    }
    wgrad_geom g = wgrad_geometry(s);
    int16_t *a = (int16_t *)ws;
    int16_t *b = (int16_t *)((uint8_t *)a + s8_ws_part(2 * s8_round2(g.cout_g) * S8_CHUNK));
    int32_t *tab = (int32_t *)((uint8_t *)b + s8_ws_part(2 * 2 * S8_CHUNK));
    chunk_pos p = {tab, tab + S8_CHUNK, tab + 2 * S8_CHUNK};
    for (int32_t start = 0; start < g.total; start += S8_CHUNK) {
        int32_t count = s8_min(S8_CHUNK, g.total - start), quads = s8_round4(count) >> 2;
        locate(s, &g, start, count, &p);
        for (int32_t group = 0; group < s->groups; group++) {
            int32_t lo = s8_max(co_begin, group * g.cout_g), hi = s8_min(co_end, (group + 1) * g.cout_g);
            if (lo >= hi) continue;
            pack_grad_rows(s, &g, grad, lo, hi, start, count, a);
            for (int32_t k = 0; k < g.k; k += 2) {
                pack_tap_pair(s, &g, x, z_x, group, k, &p, count, b);
                for (int32_t r = lo; r < hi; r += 2) {
                    int32_t *w0 = gw + (r - co_begin) * g.k + k, *w1 = w0 + g.k;
                    int32_t two_rows = r + 1 < hi, two_taps = k + 1 < g.k;
                    uint32_t acc[4] = {0, 0, 0, 0};
                    if (start > 0) {
                        acc[0] = (uint32_t)w0[0];
                        acc[1] = two_taps ? (uint32_t)w0[1] : 0u;
                        acc[2] = two_rows ? (uint32_t)w1[0] : 0u;
                        acc[3] = two_rows && two_taps ? (uint32_t)w1[1] : 0u;
                    }
                    s8_tile_2x2(quads, a + ((r - lo) >> 1) * 2 * S8_CHUNK, b, acc);
                    w0[0] = (int32_t)acc[0];
                    if (two_taps) w0[1] = (int32_t)acc[1];
                    if (two_rows) {
                        w1[0] = (int32_t)acc[2];
                        if (two_taps) w1[1] = (int32_t)acc[3];
                    }
                }
            }
        }
    }
}
