/* s8_gemm.c - the packed 2 x 2 tile and the correlation driver of the int8 convolutions.
 *
 * The driver computes out[n, co, oh, ow] = epilogue(sum_k A[co, k] * col[k]) for a
 * convolution (forward) or the stride-1 transposed convolution (input gradient) as
 * packed dot products (s8_gemm.h). Columns come in pairs:
 *   - 1x1, stride 1, no padding (pointwise, linear): a column is one position's channels,
 *     read straight from NCHW; pairs run over the flattened (n, position) index, so a
 *     linear layer pairs two samples;
 *   - otherwise: a band of two output rows' input rows is widened once into int16 with
 *     its padding (x - z, 0 outside), and a column is gathered from the band through a
 *     table of the taps' offsets: no bound is tested per element.
 * Each column pair is packed once and used by every pair of output channels. */
#include "s8_gemm.h"

/* ---- the tile ------------------------------------------------------------------------ */

#if S8_DSP && defined(__GNUC__) && defined(__thumb2__)
/* One quad: LDM four words of B (two columns), LDM two words of each A row; 8 SMLAD.
 * r4-r6, r8-r10 are scratch; r7 is left to GCC (frame pointer in some builds). */
#define S8_TILE_QUAD                                                                   \
    "ldmia %[b]!, {r4, r5, r6, r8}\n\t"                                                \
    "ldmia %[a]!, {r9, r10}\n\t"                                                       \
    "smlad %[s00], r9, r4, %[s00]\n\t"                                                 \
    "smlad %[s00], r10, r5, %[s00]\n\t"                                                \
    "smlad %[s01], r9, r6, %[s01]\n\t"                                                 \
    "smlad %[s01], r10, r8, %[s01]\n\t"                                                \
    "ldmia %[a]!, {r9, r10}\n\t"                                                       \
    "smlad %[s10], r9, r4, %[s10]\n\t"                                                 \
    "smlad %[s10], r10, r5, %[s10]\n\t"                                                \
    "smlad %[s11], r9, r6, %[s11]\n\t"                                                 \
    "smlad %[s11], r10, r8, %[s11]\n\t"

void s8_tile_2x2(int32_t quads, const int16_t *a, const int16_t *b, uint32_t acc[4])
{
    uint32_t s00 = acc[0], s01 = acc[1], s10 = acc[2], s11 = acc[3];
    int32_t pairs = quads >> 1;
    if (quads & 1) {
        __asm__ volatile(S8_TILE_QUAD
                         : [s00] "+r"(s00), [s01] "+r"(s01), [s10] "+r"(s10), [s11] "+r"(s11), [a] "+r"(a),
                           [b] "+r"(b)
                         :
                         : "r4", "r5", "r6", "r8", "r9", "r10", "memory");
    }
    if (pairs > 0) {
        __asm__ volatile("1:\n\t" S8_TILE_QUAD S8_TILE_QUAD "subs %[n], %[n], #1\n\t"
                         "bne 1b\n\t"
                         : [s00] "+r"(s00), [s01] "+r"(s01), [s10] "+r"(s10), [s11] "+r"(s11), [a] "+r"(a),
                           [b] "+r"(b), [n] "+r"(pairs)
                         :
                         : "r4", "r5", "r6", "r8", "r9", "r10", "cc", "memory");
    }
    acc[0] = s00;
    acc[1] = s01;
    acc[2] = s10;
    acc[3] = s11;
}
#else
void s8_tile_2x2(int32_t quads, const int16_t *a, const int16_t *b, uint32_t acc[4])
{
    uint32_t s00 = acc[0], s01 = acc[1], s10 = acc[2], s11 = acc[3];
    for (int32_t q = 0; q < quads; q++, a += 8, b += 8) {
        uint32_t b0 = s8_load32(b), b1 = s8_load32(b + 2), b2 = s8_load32(b + 4), b3 = s8_load32(b + 6);
        uint32_t a0 = s8_load32(a), a1 = s8_load32(a + 2), a2 = s8_load32(a + 4), a3 = s8_load32(a + 6);
        s00 = s8_smlad(a1, b1, s8_smlad(a0, b0, s00));
        s01 = s8_smlad(a1, b3, s8_smlad(a0, b2, s01));
        s10 = s8_smlad(a3, b1, s8_smlad(a2, b0, s10));
        s11 = s8_smlad(a3, b3, s8_smlad(a2, b2, s11));
    }
    acc[0] = s00;
    acc[1] = s01;
    acc[2] = s10;
    acc[3] = s11;
}
#endif

/* ---- packing ------------------------------------------------------------------------- */

void s8_pack_rows(int32_t rows, int32_t k, const int8_t *src, int32_t row_step, int16_t *dst)
{
    int32_t k4 = s8_round4(k), rows2 = s8_round2(rows);
    for (int32_t r = 0; r < rows2; r++) {
        int16_t *d = dst + (r >> 1) * 2 * k4 + (r & 1) * 4;
        for (int32_t t = 0; t < k4; t++) d[s8_slot(t)] = (int16_t)((r < rows && t < k) ? src[r * row_step + t] : 0);
    }
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
    g.band_w = (c->out_w - 1) * c->stride_w + c->kw;
    return g;
}

int32_t s8_corr_ws(const s8_corr *c)
{
    corr_geom g = geometry(c);
    int32_t bytes = s8_ws_part(2 * g.cout_g2 * g.k4) + s8_ws_part(2 * 2 * g.k4);
    if (!g.direct)
        bytes += s8_ws_part(4 * g.k) + s8_ws_part(2 * g.cin_g * g.band_h * g.band_w);
    return bytes;
}

/* Column (sample, position) of a direct correlation: in channel t of the group. */
static void pack_direct_pair(const s8_corr *c, const corr_geom *g, int32_t group, int32_t col0, int32_t col1,
                             int16_t *b)
{
    int32_t p = g->in_plane, z = c->z;
    const int8_t *x0 = c->in + ((col0 / p) * c->in_c + group * g->cin_g) * p + col0 % p;
    const int8_t *x1 = c->in + ((col1 / p) * c->in_c + group * g->cin_g) * p + col1 % p;
    for (int32_t t = 0; t < g->k4; t += 4, b += 8) {
        for (int32_t u = 0; u < 4; u++) {
            int32_t in = t + u < g->k;
            b[s8_slot(u)] = (int16_t)(in ? x0[(t + u) * p] - z : 0);
            b[4 + s8_slot(u)] = (int16_t)(in ? x1[(t + u) * p] - z : 0);
        }
    }
}

/* The input rows of output rows [r0, r0 + rows) of one sample and group, widened:
 * band[ci][t][u] = in[ci][r0 * sh - pt + t][u - pl] - z, 0 outside the input. */
static void fill_band(const s8_corr *c, const corr_geom *g, int32_t sample, int32_t group, int32_t r0,
                      int16_t *band)
{
    const int8_t *x = c->in + (sample * c->in_c + group * g->cin_g) * g->in_plane;
    int32_t row0 = r0 * c->stride_h - c->pad_top;
    int32_t u0 = s8_min(s8_max(c->pad_left, 0), g->band_w);                /* first column inside */
    int32_t u1 = s8_max(s8_min(c->pad_left + c->in_w, g->band_w), u0);     /* past the last one */
    for (int32_t ci = 0; ci < g->cin_g; ci++, x += g->in_plane) {
        for (int32_t t = 0; t < g->band_h; t++, band += g->band_w) {
            int32_t row = row0 + t;
            if (row < 0 || row >= c->in_h) {
                for (int32_t u = 0; u < g->band_w; u++) band[u] = 0;
                continue;
            }
            const int8_t *src = x + row * c->in_w;
            int32_t u = 0;
            for (; u < u0; u++) band[u] = 0;
            for (; u < u1; u++) band[u] = (int16_t)(src[u - c->pad_left] - c->z);
            for (; u < g->band_w; u++) band[u] = 0;
        }
    }
}

static void tap_offsets(const s8_corr *c, const corr_geom *g, int32_t *off)
{
    for (int32_t ci = 0, t = 0; ci < g->cin_g; ci++)
        for (int32_t i = 0; i < c->kh; i++)
            for (int32_t j = 0; j < c->kw; j++) off[t++] = (ci * g->band_h + i) * g->band_w + j;
}

static void pack_band_pair(const corr_geom *g, const int32_t *off, const int16_t *p0, const int16_t *p1, int16_t *b)
{
    int32_t t = 0;
    for (; t + 4 <= g->k; t += 4, b += 8, off += 4) {
        b[0] = p0[off[0]], b[1] = p0[off[2]], b[2] = p0[off[1]], b[3] = p0[off[3]];
        b[4] = p1[off[0]], b[5] = p1[off[2]], b[6] = p1[off[1]], b[7] = p1[off[3]];
    }
    if (t < g->k) {
        for (int32_t u = 0; u < 4; u++) {
            int32_t in = t + u < g->k;
            b[s8_slot(u)] = in ? p0[off[u]] : 0;
            b[4 + s8_slot(u)] = in ? p1[off[u]] : 0;
        }
    }
}

/* ---- the driver ---------------------------------------------------------------------- */

enum { MODE_FWD = 0, MODE_GRAD = 1 };

typedef struct corr_out {
    int mode;
    s8_fwd_out *f;
    s8_grad_out *q;
} corr_out;

/* Every output channel pair of the group against one packed column pair; col1 < 0: a
 * single column (its pair is a copy, not written). */
S8_INLINE void run_rows(const s8_corr *c, const corr_geom *g, int32_t group, const int16_t *a, const int16_t *b,
                        int32_t col0, int32_t col1, const corr_out *o)
{
    int32_t p = g->out_plane;
    int32_t base0 = (col0 / p) * c->out_c * p + col0 % p;
    int32_t base1 = col1 >= 0 ? (col1 / p) * c->out_c * p + col1 % p : 0;
    for (int32_t r = 0; r < g->cout_g; r += 2, a += 2 * g->k4) {
        int32_t co = group * g->cout_g + r;
        int32_t two = r + 1 < g->cout_g;
        uint32_t acc[4] = {0, 0, 0, 0};
        if (o->mode == MODE_FWD && o->f->bias) {
            acc[0] = acc[1] = (uint32_t)o->f->bias[co];
            acc[2] = acc[3] = two ? (uint32_t)o->f->bias[co + 1] : 0u;
        }
        s8_tile_2x2(g->quads, a, b, acc);
        if (o->mode == MODE_FWD) {
            int8_t *y = o->f->y;
            y[base0 + co * p] = s8_fwd_one(o->f, &o->f->rq[co], acc[0]);
            if (col1 >= 0) y[base1 + co * p] = s8_fwd_one(o->f, &o->f->rq[co], acc[1]);
            if (two) {
                y[base0 + (co + 1) * p] = s8_fwd_one(o->f, &o->f->rq[co + 1], acc[2]);
                if (col1 >= 0) y[base1 + (co + 1) * p] = s8_fwd_one(o->f, &o->f->rq[co + 1], acc[3]);
            }
        } else {
            int8_t *y = o->q->g_x;
            y[base0 + co * p] = s8_grad_one(o->q, acc[0]);
            if (col1 >= 0) y[base1 + co * p] = s8_grad_one(o->q, acc[1]);
            if (two) {
                y[base0 + (co + 1) * p] = s8_grad_one(o->q, acc[2]);
                if (col1 >= 0) y[base1 + (co + 1) * p] = s8_grad_one(o->q, acc[3]);
            }
        }
    }
}

S8_INLINE void corr_run(const s8_corr *c, s8_pack_group pack, void *ctx, const corr_out *o, void *ws)
{
    corr_geom g = geometry(c);
    int16_t *a = (int16_t *)ws;
    int16_t *b = (int16_t *)((uint8_t *)ws + s8_ws_part(2 * g.cout_g2 * g.k4));
    int32_t *off = (int32_t *)((uint8_t *)b + s8_ws_part(2 * 2 * g.k4));
    int16_t *band = (int16_t *)((uint8_t *)off + s8_ws_part(4 * g.k));
    if (!g.direct)
        tap_offsets(c, &g, off);
    for (int32_t group = 0; group < c->groups; group++) {
        pack(ctx, group, a);
        if (g.direct) {
            int32_t total = c->n * g.out_plane;
            for (int32_t j = 0; j < total; j += 2) {
                int32_t j1 = j + 1 < total ? j + 1 : -1;
                pack_direct_pair(c, &g, group, j, j1 >= 0 ? j1 : j, b);
                run_rows(c, &g, group, a, b, j, j1, o);
            }
            continue;
        }
        for (int32_t sample = 0; sample < c->n; sample++) {
            for (int32_t r0 = 0; r0 < c->out_h; r0 += 2) {
                int32_t npos = s8_min(2, c->out_h - r0) * c->out_w;
                int32_t col = (sample * c->out_h + r0) * c->out_w;
                fill_band(c, &g, sample, group, r0, band);
                for (int32_t j = 0; j < npos; j += 2) {
                    int32_t j1 = j + 1 < npos ? j + 1 : j;
                    const int16_t *p0 = band + (j / c->out_w) * c->stride_h * g.band_w + (j % c->out_w) * c->stride_w;
                    const int16_t *p1 =
                        band + (j1 / c->out_w) * c->stride_h * g.band_w + (j1 % c->out_w) * c->stride_w;
                    pack_band_pair(&g, off, p0, p1, b);
                    run_rows(c, &g, group, a, b, col + j, j + 1 < npos ? col + j1 : -1, o);
                }
            }
        }
    }
}

void s8_corr_fwd(const s8_corr *c, s8_pack_group pack, void *ctx, s8_fwd_out *f, void *ws)
{
    corr_out o = {MODE_FWD, f, 0};
    corr_run(c, pack, ctx, &o, ws);
}

void s8_corr_grad(const s8_corr *c, s8_pack_group pack, void *ctx, s8_grad_out *q, void *ws)
{
    corr_out o = {MODE_GRAD, 0, q};
    corr_run(c, pack, ctx, &o, ws);
}
