/* s8_gemm.c - the correlation driver of the int8 convolutions (forward, and the stride-1
 * transposed convolution of the input gradient) on the packed tile of s8_gemm.h.
 *
 * out[n, co, oh, ow] = epilogue(sum_k A[co, k] * col[k]) with the columns in pairs:
 *   - 1x1, stride 1, no padding (pointwise, linear): a column is one position's channels,
 *     read straight from NCHW, pairs over the flattened (n, position) index (a linear
 *     layer pairs two samples); two neighbouring positions pack together: one halfword
 *     per channel holds both, SXTAB16 widens and subtracts z for four channels at once;
 *   - otherwise: the input rows of two output rows are widened once into int16 with
 *     their padding (a "band": x - z, 0 outside), and a column is gathered from the band
 *     through a table of the taps' offsets, so no bound is tested per element; at unit
 *     stride the two columns of a pair are neighbours, one word per tap (PKHBT/PKHTB
 *     deal the words into the quads).
 * Each column pair is packed once and used by every pair of output channels. */
#include "s8_gemm.h"

/* ---- packing ---------------------------------------------------------------------------- */

void s8_pack_rows(int32_t rows, int32_t k, const int8_t *src, int32_t row_step, int16_t *dst)
{
    int32_t k4 = s8_round4(k), rows2 = s8_round2(rows);
    for (int32_t r = 0; r < rows2; r++) {
        int16_t *d = dst + (r >> 1) * 2 * k4 + (r & 1) * 4;
        for (int32_t t = 0; t < k4; t++) d[s8_slot(t)] = (int16_t)((r < rows && t < k) ? src[r * row_step + t] : 0);
    }
}

void s8_widen(int16_t *d, const int8_t *s, int32_t n, int32_t offset)
{
    uint32_t off2 = s8_pair(offset, offset), e, o;
    int32_t t = 0;
    for (; t + 4 <= n; t += 4) {
        s8_quad(s8_load32(s + t), off2, &e, &o); /* (x0, x2), (x1, x3) */
        s8_store32(d + t, s8_pack_lo(e, o));
        s8_store32(d + t + 2, s8_pack_hi(e, o));
    }
    for (; t < n; t++) d[t] = (int16_t)(s[t] + offset);
}

/* ---- geometry ------------------------------------------------------------------------ */

typedef struct corr_geom {
    int32_t cin_g, cout_g, cout_g2, k, k4, quads;
    int32_t in_plane, out_plane;
    int32_t direct;         /* 1x1, stride 1, no padding: columns straight from NCHW */
    int32_t band_h, band_w; /* the widened band of two output rows (not direct) */
} corr_geom;

static corr_geom geometry(const s8_corr *c)
{
    corr_geom g;
    g.cin_g = c->in_c / c->groups;
    g.cout_g = c->out_c / c->groups;
    g.cout_g2 = s8_round2(g.cout_g);
    g.k = g.cin_g * c->kh * c->kw;
    g.k4 = s8_round4(g.k);
    g.quads = g.k4 >> 2;
    g.in_plane = c->in_h * c->in_w;
    g.out_plane = c->out_h * c->out_w;
    g.direct = c->kh == 1 && c->kw == 1 && c->stride_h == 1 && c->stride_w == 1 && c->pad_top == 0 &&
               c->pad_left == 0 && c->out_h == c->in_h && c->out_w == c->in_w;
    g.band_h = (c->out_h > 1 ? c->stride_h : 0) + c->kh;
    g.band_w = (c->out_w - 1) * c->stride_w + c->kw + 1; /* + a spare column: a pair's word read */
    return g;
}

/* ---- columns ------------------------------------------------------------------------- */

/* Columns col0 and col1 of a direct correlation: the group's channels at their positions
 * (channels past K read channel 0: A is 0 there). */
static void pack_direct_pair(const s8_corr *c, const corr_geom *g, int32_t group, int32_t col0, int32_t col1,
                             int16_t *b)
{
    int32_t p = g->in_plane;
    uint32_t off2 = s8_pair(-c->z, -c->z);
    const int8_t *x0 = c->in + ((col0 / p) * c->in_c + group * g->cin_g) * p + col0 % p;
    if (col1 == col0 + 1 && col0 % p != p - 1) { /* neighbours: one halfword per channel */
        for (int32_t t = 0; t < g->k; t += 4, b += 8) {
            uint32_t h0 = s8_load16(x0 + t * p);
            uint32_t h1 = t + 1 < g->k ? s8_load16(x0 + (t + 1) * p) : 0u;
            uint32_t h2 = t + 2 < g->k ? s8_load16(x0 + (t + 2) * p) : 0u;
            uint32_t h3 = t + 3 < g->k ? s8_load16(x0 + (t + 3) * p) : 0u;
            uint32_t w02 = h0 | (h2 << 16), w13 = h1 | (h3 << 16), q[4];
            s8_quad(w02, off2, &q[0], &q[2]); /* channel t, t+2 of col0; of col1 */
            s8_quad(w13, off2, &q[1], &q[3]);
            memcpy(b, q, 16);
        }
        return;
    }
    const int8_t *x1 = c->in + ((col1 / p) * c->in_c + group * g->cin_g) * p + col1 % p;
    for (int32_t t = 0; t < g->k4; t++) {
        int32_t ch = t < g->k ? t : 0;
        b[(t & ~3) * 2 + s8_slot(t & 3)] = (int16_t)(x0[ch * p] - c->z);
        b[(t & ~3) * 2 + 4 + s8_slot(t & 3)] = (int16_t)(x1[ch * p] - c->z);
    }
}

/* The input rows of output rows [r0, r0 + 2) of one sample and group, widened:
 * band[ci][t][u] = in[ci][r0 * sh - pt + t][u - pl] - z, 0 outside the input. */
static void fill_band(const s8_corr *c, const corr_geom *g, int32_t sample, int32_t group, int32_t r0,
                      int16_t *band)
{
    const int8_t *x = c->in + (sample * c->in_c + group * g->cin_g) * g->in_plane;
    int32_t row0 = r0 * c->stride_h - c->pad_top;
    int32_t u0 = s8_min(s8_max(c->pad_left, 0), g->band_w);            /* first column inside */
    int32_t u1 = s8_max(s8_min(c->pad_left + c->in_w, g->band_w), u0); /* past the last one */
    for (int32_t ci = 0; ci < g->cin_g; ci++, x += g->in_plane) {
        for (int32_t t = 0; t < g->band_h; t++, band += g->band_w) {
            int32_t row = row0 + t;
            if (row < 0 || row >= c->in_h) {
                for (int32_t u = 0; u < g->band_w; u++) band[u] = 0;
                continue;
            }
            for (int32_t u = 0; u < u0; u++) band[u] = 0;
            s8_widen(band + u0, x + row * c->in_w + u0 - c->pad_left, u1 - u0, -c->z);
            for (int32_t u = u1; u < g->band_w; u++) band[u] = 0;
        }
    }
}

static void tap_offsets(const s8_corr *c, const corr_geom *g, int32_t *off)
{
    int32_t t = 0;
    for (int32_t ci = 0; ci < g->cin_g; ci++)
        for (int32_t i = 0; i < c->kh; i++)
            for (int32_t j = 0; j < c->kw; j++) off[t++] = (ci * g->band_h + i) * g->band_w + j;
    for (; t < g->k4; t++) off[t] = 0; /* K's padding reads the first element (A is 0 there) */
}

static void pack_band_pair(const corr_geom *g, const int32_t *off, const int16_t *p0, const int16_t *p1, int16_t *b)
{
    uint32_t q[4];
    if (p1 == p0 + 1) { /* neighbours: each tap's word holds both columns */
        for (int32_t t = 0; t < g->k4; t += 4, b += 8, off += 4) {
            uint32_t w0 = s8_load32(p0 + off[0]), w1 = s8_load32(p0 + off[1]);
            uint32_t w2 = s8_load32(p0 + off[2]), w3 = s8_load32(p0 + off[3]);
            q[0] = s8_pack_lo(w0, w2), q[1] = s8_pack_lo(w1, w3);
            q[2] = s8_pack_hi(w0, w2), q[3] = s8_pack_hi(w1, w3);
            memcpy(b, q, 16);
        }
        return;
    }
    for (int32_t t = 0; t < g->k4; t += 4, b += 8, off += 4) {
        q[0] = s8_pack_lo((uint32_t)p0[off[0]], (uint32_t)p0[off[2]]);
        q[1] = s8_pack_lo((uint32_t)p0[off[1]], (uint32_t)p0[off[3]]);
        q[2] = s8_pack_lo((uint32_t)p1[off[0]], (uint32_t)p1[off[2]]);
        q[3] = s8_pack_lo((uint32_t)p1[off[1]], (uint32_t)p1[off[3]]);
        memcpy(b, q, 16);
    }
}

/* ---- blocks of columns -------------------------------------------------------------------
 * The accumulators of up to S8_BLOCK columns (in pairs) of every output channel of the
 * group are kept, acc[channel][column]; then each channel's epilogue runs over its columns
 * with its constants in registers. A block's columns are outputs col_step apart in y. */

#define S8_BLOCK 16

typedef struct block {
    int32_t ncols;
    int8_t *y;        /* the block's first column, the group's first channel */
    int32_t col_step; /* y elements between neighbouring columns */
} block;


typedef struct corr_out {
    s8_fwd_out *f;  /* the forward, or */
    s8_grad_out *q; /* the input gradient */
    s8_fwd_state st;
} corr_out;

typedef struct corr_ws {
    int16_t *a, *b, *band;
    uint32_t *acc, *init; /* init: each channel's first value (bias or 0), cout_g2 of them */
    int32_t *off;
} corr_ws;

static void run_block(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, const block *bl,
                      const int16_t *const *p0, const int32_t *cols, corr_out *o)
{
    int32_t pairs = g->cout_g2 >> 1, co = group * g->cout_g;
    for (int32_t j = 0; j < bl->ncols; j += 2) {
        int32_t j1 = j + 1 < bl->ncols ? j + 1 : j;
        if (p0)
            pack_band_pair(g, w->off, p0[j], p0[j1], w->b);
        else
            pack_direct_pair(c, g, group, cols[j], cols[j1], w->b);
        s8_tiles(g->quads, pairs, w->a, w->b, w->init, w->acc + j, S8_BLOCK);
    }
    if (o->f)
        s8_epi_fwd(w->acc, g->cout_g, S8_BLOCK, bl->ncols, bl->y, g->out_plane, bl->col_step, o->f->rq + co, 1, &o->st);
    else
        s8_epi_grad(w->acc, g->cout_g, S8_BLOCK, bl->ncols, bl->y, g->out_plane, bl->col_step, &o->q->ms, &o->q->amax);
}

static corr_ws carve(const corr_geom *g, void *ws)
{
    corr_ws w;
    uint8_t *p = (uint8_t *)ws;
    w.a = (int16_t *)p, p += s8_ws_part(2 * g->cout_g2 * g->k4);
    w.b = (int16_t *)p, p += s8_ws_part(2 * 2 * g->k4);
    w.acc = (uint32_t *)p, p += s8_ws_part(4 * g->cout_g2 * S8_BLOCK);
    w.init = (uint32_t *)p, p += s8_ws_part(4 * g->cout_g2);
    w.off = (int32_t *)p, p += s8_ws_part(4 * g->k4);
    w.band = (int16_t *)p;
    return w;
}

int32_t s8_corr_ws(const s8_corr *c)
{
    corr_geom g = geometry(c);
    int32_t bytes = s8_ws_part(2 * g.cout_g2 * g.k4) + s8_ws_part(2 * 2 * g.k4) + s8_ws_part(4 * g.cout_g2 * S8_BLOCK) +
                    s8_ws_part(4 * g.cout_g2);
    if (!g.direct)
        bytes += s8_ws_part(4 * g.k4) + s8_ws_part(2 * g.cin_g * g.band_h * g.band_w);
    return bytes;
}

/* 1x1: runs of positions of one sample, or of samples when a sample is one position. */
static void direct_blocks(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, int8_t *out,
                          corr_out *o)
{
    int32_t p = g->out_plane, cols[S8_BLOCK];
    int32_t total = c->n * p, per = p == 1 ? total : p;
    for (int32_t start = 0; start < total; start += per)
        for (int32_t j0 = 0; j0 < per; j0 += S8_BLOCK) {
            block bl = {s8_min(S8_BLOCK, per - j0), 0, p == 1 ? c->out_c : 1};
            int32_t col0 = start + j0;
            bl.y = out + ((col0 / p) * c->out_c + group * g->cout_g) * p + col0 % p;
            for (int32_t j = 0; j < bl.ncols; j++) cols[j] = col0 + j;
            run_block(c, g, group, w, &bl, 0, cols, o);
        }
}

/* Otherwise: two output rows at a time from the widened band. */
static void band_blocks(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, int8_t *out,
                        corr_out *o)
{
    const int16_t *p0[S8_BLOCK];
    for (int32_t sample = 0; sample < c->n; sample++)
        for (int32_t r0 = 0; r0 < c->out_h; r0 += 2) {
            int32_t npos = s8_min(2, c->out_h - r0) * c->out_w;
            fill_band(c, g, sample, group, r0, w->band);
            for (int32_t j0 = 0; j0 < npos; j0 += S8_BLOCK) {
                block bl = {s8_min(S8_BLOCK, npos - j0), 0, 1};
                bl.y = out + (sample * c->out_c + group * g->cout_g) * g->out_plane + r0 * c->out_w + j0;
                for (int32_t j = 0; j < bl.ncols; j++) {
                    int32_t pos = j0 + j;
                    p0[j] = w->band + (pos / c->out_w) * c->stride_h * g->band_w + (pos % c->out_w) * c->stride_w;
                }
                run_block(c, g, group, w, &bl, p0, 0, o);
            }
        }
}

static void corr_run(const s8_corr *c, s8_pack_group pack, void *ctx, corr_out *o, void *ws)
{
    corr_geom g = geometry(c);
    corr_ws w = carve(&g, ws);
    int8_t *out = o->f ? o->f->y : o->q->g_x;
    if (!g.direct)
        tap_offsets(c, &g, w.off);
    for (int32_t group = 0; group < c->groups; group++) {
        pack(ctx, group, w.a);
        const int32_t *bias = o->f ? o->f->bias : 0;
        for (int32_t r = 0; r < g.cout_g2; r++)
            w.init[r] = bias && r < g.cout_g ? (uint32_t)bias[group * g.cout_g + r] : 0u;
        if (g.direct)
            direct_blocks(c, &g, group, &w, out, o);
        else
            band_blocks(c, &g, group, &w, out, o);
    }
}

void s8_corr_fwd(const s8_corr *c, s8_pack_group pack, void *ctx, s8_fwd_out *f, void *ws)
{
    corr_out o = {f, 0, s8_fwd_begin(f)};
    corr_run(c, pack, ctx, &o, ws);
    f->vmin = o.st.vmin;
    f->vmax = o.st.vmax;
}

void s8_corr_grad(const s8_corr *c, s8_pack_group pack, void *ctx, s8_grad_out *q, void *ws)
{
    corr_out o = {0, q, {0, 0, 0, 0, 0, 0, 0}};
    corr_run(c, pack, ctx, &o, ws);
}
