/* conv_dw_s8.c - int8 depthwise convolution (groups == c_in == c_out): forward, input
 * gradient (stride 1) and weight gradient.
 *
 * One channel at a time, its plane is widened into int16 inside a zero border (written
 * once per call: the border is the padding, x - z_x = 0 there), so no loop tests a
 * bound. The plane is oriented so that outputs run in pairs along its longer axis `t`
 * (kws_dscnn's 25 x 5 planes: down the columns, in 13 pairs instead of 3 per row for 5
 * rows); the other axis `l` is the kernel's lanes. With three taps along t at stride
 * 1, a pair of outputs (t, t+1) reads two aligned words per lane, A = (u[t], u[t+1])
 * and B = (u[t+2], u[t+3]), against two weight words (w0, w1) and (w1, w2):
 *     y[t]   += SMLAD(A, w01) + SMLABT(B, w12)
 *     y[t+1] += SMLATB(A, w01) + SMLAD(B, w12)
 * 6 loads and 12 multiply instructions for 18 multiply-accumulates. Other kernels sum
 * pairs of neighbouring taps per output (an odd last tap against a zero weight).
 *
 * The input gradient is the same correlation over the gradient's plane with the kernel
 * flipped and R[c] folded into the weights (exact: W R fits int16). The weight gradient
 * pairs neighbouring outputs along t: a word of two gradients against the word of the
 * two inputs each tap reads (stride 1 along t; otherwise one product at a time). */
#include "s8_conv.h"

#define S8_ARG __attribute__((unused))

/* A padded channel plane in orientation: lanes l (rows of `stride` int16) by t. */
typedef struct dw_geom {
    int32_t transposed;          /* t runs down the columns */
    int32_t n_l, n_t;            /* outputs along l and t */
    int32_t k_l, k_t, s_l, s_t;  /* kernel extent and stride along l and t */
    int32_t p_l, p_t;            /* padding before the input along l and t */
    int32_t in_l, in_t;          /* input extent along l and t */
    int32_t rows, stride;        /* the plane: rows lanes of stride int16 */
    int32_t y_l, y_t;            /* output element steps along l and t */
} dw_geom;

/* The correlation out[n_l, n_t] of an in_h x in_w plane with a kh x kw kernel. */
static dw_geom orient(int32_t in_h, int32_t in_w, int32_t out_h, int32_t out_w, int32_t kh, int32_t kw, int32_t sh,
                      int32_t sw, int32_t ph, int32_t pw)
{
    dw_geom g;
    g.transposed = out_h > out_w;
    if (g.transposed) {
        g.n_l = out_w, g.n_t = out_h, g.k_l = kw, g.k_t = kh, g.s_l = sw, g.s_t = sh, g.p_l = pw, g.p_t = ph;
        g.in_l = in_w, g.in_t = in_h, g.y_l = 1, g.y_t = out_w;
    } else {
        g.n_l = out_h, g.n_t = out_w, g.k_l = kh, g.k_t = kw, g.s_l = sh, g.s_t = sw, g.p_l = ph, g.p_t = pw;
        g.in_l = in_h, g.in_t = in_w, g.y_l = out_w, g.y_t = 1;
    }
    g.rows = (g.n_l - 1) * g.s_l + g.k_l;
    /* pairs of outputs read up to (round2(n_t) - 1) * s_t + k_t (+1 for an odd tap pair) */
    g.stride = s8_round2(s8_round2(g.n_t) * g.s_t + g.k_t + 1);
    return g;
}

static int32_t plane_bytes(const dw_geom *g) { return s8_ws_part(2 * g->rows * g->stride); }

static void zero_plane(const dw_geom *g, int16_t *u)
{
    for (int32_t i = 0; i < g->rows * g->stride; i++) u[i] = 0;
}

/* The interior: u[p_l + l][p_t + t] = src at (l, t) of the orientation, + offset, for
 * the positions inside the plane (a negative padding crops: a transposed correlation
 * whose forward padding exceeded kernel - 1 never reads the gradient's first rows). */
static void fill_plane(const dw_geom *g, const int8_t *src, int32_t offset, int16_t *u)
{
    int32_t l0 = s8_max(0, -g->p_l), l1 = s8_min(g->in_l, g->rows - g->p_l);
    int32_t t0 = s8_max(0, -g->p_t), t1 = s8_min(g->in_t, g->stride - g->p_t);
    if (g->transposed) { /* src is in_t rows of in_l: lane l is column l of src */
        uint32_t off2 = s8_pair(offset, offset), e, o;
        int32_t st = g->stride, l = l0, n = t1 - t0;
        for (; l + 4 <= l1; l += 4) { /* four lanes: one load and two SXTAB16 per source row */
            int16_t *d0 = u + (g->p_l + l) * st + g->p_t + t0, *d1 = d0 + st, *d2 = d1 + st, *d3 = d2 + st;
            const int8_t *x = src + t0 * g->in_l + l;
            for (int32_t i = 0; i < n; i++, x += g->in_l) {
                s8_quad(s8_load32(x), off2, &e, &o);
                *d0++ = (int16_t)e, *d1++ = (int16_t)o, *d2++ = (int16_t)(e >> 16), *d3++ = (int16_t)(o >> 16);
            }
        }
        for (; l < l1; l++) {
            int16_t *d = u + (g->p_l + l) * st + g->p_t + t0;
            const int8_t *x = src + t0 * g->in_l + l;
            for (int32_t i = 0; i < n; i++, x += g->in_l) *d++ = (int16_t)(*x + offset);
        }
    } else {
        for (int32_t l = l0; l < l1; l++)
            s8_widen(u + (g->p_l + l) * g->stride + g->p_t + t0, src + l * g->in_t + t0, t1 - t0, offset);
    }
}

/* Kernel tap (l, t) of the orientation, from w[kh][kw], flipped for the input gradient. */
static int32_t tap(const dw_geom *g, const int8_t *w, int32_t l, int32_t t, int32_t flip)
{
    if (flip) {
        l = g->k_l - 1 - l;
        t = g->k_t - 1 - t;
    }
    return g->transposed ? w[t * g->k_l + l] : w[l * g->k_t + t];
}

/* Three taps at stride 1 along t: outputs in pairs (see the head of the file). */
static int32_t in_pairs(const dw_geom *g) { return g->k_t == 3 && g->s_t == 1; }

/* Per lane the words (w0, w1), (w1, w2) for pairs of outputs, else (w0, w1), (w2, w3), ... */
static void weight_words(const dw_geom *g, const int8_t *w, int32_t flip, int32_t scale, uint32_t *wp)
{
    int32_t three = in_pairs(g), per = three ? 2 : (g->k_t + 1) >> 1;
    for (int32_t l = 0; l < g->k_l; l++)
        for (int32_t i = 0; i < per; i++) {
            int32_t t0 = three ? i : 2 * i;
            int32_t a = tap(g, w, l, t0, flip) * scale;
            int32_t b = t0 + 1 < g->k_t ? tap(g, w, l, t0 + 1, flip) * scale : 0;
            wp[l * per + i] = s8_pair(a, b);
        }
}

S8_INLINE int32_t weight_words_bytes(int32_t kh, int32_t kw) { return s8_ws_part(4 * kh * (s8_max(kh, kw) + 1)); }

/* The sums of the plane's outputs (rows of n_t padded to even). */
static int32_t sums_bytes(const dw_geom *g) { return s8_ws_part(4 * g->n_l * s8_round2(g->n_t)); }

/* Three taps at stride 1 along t, three lanes, outputs in pairs: acc[2p], acc[2p + 1]
 * for p < pairs, from the lane rows r, r + stride, r + 2 stride (int16, word aligned) and
 * the six weight words (w0 w1) (w1 w2) of each lane (see the head of the file). */
#if S8_DSP && defined(__GNUC__) && defined(__thumb2__)
/* r0 r, r1 stride in bytes, r2 wp, r3 acc, [sp] pairs, [sp + 4] bias. The weights live
 * in r4-r9 for the whole run; per pair three LDRD, twelve multiplies, one STRD: 24. */
#define S8_LANE(WA, WB)                                                                                          \
    "ldrd r2, r12, [r0]\n\t"                                                                                    \
    "smlad r10, r2, " WA ", r10\n\t"                                                                            \
    "smlatb r11, r2, " WA ", r11\n\t"                                                                           \
    "smlabt r10, r12, " WB ", r10\n\t"                                                                          \
    "smlad r11, r12, " WB ", r11\n\t"

__attribute__((naked)) static void pairs3(S8_ARG const int16_t *r, S8_ARG int32_t stride_bytes,
                                          S8_ARG const uint32_t *wp, S8_ARG uint32_t *acc, S8_ARG int32_t pairs,
                                          S8_ARG uint32_t bias)
{
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "ldm r2, {r4, r5, r6, r7, r8, r9}\n\t"
        "ldr lr, [sp, #36]\n\t"
        "cmp lr, #0\n\t"
        "ble 2f\n"
        "1:\n\t"
        "ldr r10, [sp, #40]\n\t"
        "mov r11, r10\n\t" S8_LANE("r4", "r5") "add r0, r0, r1\n\t" S8_LANE("r6", "r7") "add r0, r0, r1\n\t"
        S8_LANE("r8", "r9")
        "sub r0, r0, r1, lsl #1\n\t"
        "add r0, r0, #4\n\t"
        "strd r10, r11, [r3], #8\n\t"
        "subs lr, lr, #1\n\t"
        "bne 1b\n"
        "2:\n\t"
        "pop {r4-r11, pc}\n\t");
}
#else
static void pairs3(const int16_t *r, int32_t stride_bytes, const uint32_t *wp, uint32_t *acc, int32_t pairs,
                   uint32_t bias)
{
    int32_t stride = stride_bytes / 2;
    for (int32_t p = 0; p < pairs; p++, r += 2, acc += 2) {
        uint32_t a0 = bias, a1 = bias;
        for (int32_t i = 0; i < 3; i++) {
            uint32_t x0 = s8_load32(r + i * stride), x1 = s8_load32(r + i * stride + 2);
            a0 = s8_smlabt(x1, wp[2 * i + 1], s8_smlad(x0, wp[2 * i], a0));
            a1 = s8_smlad(x1, wp[2 * i + 1], s8_smlatb(x0, wp[2 * i], a1));
        }
        acc[0] = a0, acc[1] = a1;
    }
}
#endif

/* Any count of lanes: the sums of lane row l go to acc (n_t, padded to even), lane by lane. */
static void lane_sums3(const dw_geom *g, const int16_t *u, const uint32_t *wp, uint32_t bias, int32_t l,
                       uint32_t *restrict acc)
{
    int32_t n = g->n_t;
    if (g->k_l == 3) {
        pairs3(u + l * g->s_l * g->stride, 2 * g->stride, wp, acc, (n + 1) >> 1, bias);
        return;
    }
    for (int32_t i = 0; i < g->k_l; i++) {
        const int16_t *r = u + (l * g->s_l + i) * g->stride;
        uint32_t wa = wp[2 * i], wb = wp[2 * i + 1];
        for (int32_t t = 0; t < n; t += 2) {
            uint32_t x0 = s8_load32(r + t), x1 = s8_load32(r + t + 2);
            uint32_t a0 = i ? acc[t] : bias, a1 = i ? acc[t + 1] : bias;
            acc[t] = s8_smlabt(x1, wb, s8_smlad(x0, wa, a0));
            acc[t + 1] = s8_smlad(x1, wb, s8_smlatb(x0, wa, a1));
        }
    }
}

/* Where the outputs go: the forward (state, channel requantization) or the gradient. */
typedef struct dw_out {
    s8_fwd_state *st;
    const s8_rq *rq;
    const s8_ms *ms;
    uint32_t *amax;
} dw_out;

/* Any other kernel: pairs of neighbouring taps per output, one output at a time. */
static void correlate_any(const dw_geom *g, const int16_t *u, const uint32_t *wp, uint32_t bias, int8_t *y,
                          const dw_out *o)
{
    int32_t per = (g->k_t + 1) >> 1;
    for (int32_t l = 0; l < g->n_l; l++)
        for (int32_t t = 0; t < g->n_t; t++) {
            uint32_t acc = bias;
            const int16_t *r = u + l * g->s_l * g->stride + t * g->s_t;
            for (int32_t i = 0; i < g->k_l; i++, r += g->stride)
                for (int32_t j = 0; j < per; j++) acc = s8_smlad(s8_load32(r + 2 * j), wp[i * per + j], acc);
            int8_t *yt = y + l * g->y_l + t * g->y_t;
            *yt = o->st ? s8_fwd_one(o->st, o->rq, acc) : s8_grad_one(o->ms, o->amax, acc);
        }
}

static void correlate(const dw_geom *g, const int16_t *u, const uint32_t *wp, uint32_t bias, int8_t *y,
                      const dw_out *o, uint32_t *acc)
{
    if (!in_pairs(g)) {
        correlate_any(g, u, wp, bias, y, o);
        return;
    }
    int32_t row = s8_round2(g->n_t);
    for (int32_t l = 0; l < g->n_l; l++) lane_sums3(g, u, wp, bias, l, acc + l * row);
    if (o->st)
        s8_epi_fwd(acc, g->n_l, row, g->n_t, y, g->y_l, g->y_t, o->rq, 0, o->st);
    else
        s8_epi_grad(acc, g->n_l, row, g->n_t, y, g->y_l, g->y_t, o->ms, o->amax);
}

static dw_geom forward_geom(const poet_s8_conv_shape *s)
{
    return orient(s->h_in, s->w_in, s->h_out, s->w_out, s->kh, s->kw, s->stride_h, s->stride_w, s->pad_top,
                  s->pad_left);
}

int32_t s8_dw_fwd_ws(const poet_s8_conv_shape *s)
{
    dw_geom g = forward_geom(s);
    return weight_words_bytes(s->kh, s->kw) + plane_bytes(&g) + sums_bytes(&g);
}

void s8_dw_fwd(const poet_s8_conv_shape *s, const int8_t *x, int32_t z_x, const int8_t *w, s8_fwd_out *o, void *ws)
{
    dw_geom g = forward_geom(s);
    uint32_t *wp = (uint32_t *)ws;
    int16_t *u = (int16_t *)((uint8_t *)ws + weight_words_bytes(s->kh, s->kw));
    uint32_t *acc = (uint32_t *)((uint8_t *)u + plane_bytes(&g));
    int32_t plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    s8_fwd_state st = s8_fwd_begin(o);
    zero_plane(&g, u);
    for (int32_t c = 0; c < s->c_out; c++) {
        weight_words(&g, w + c * s->kh * s->kw, 0, 1, wp);
        uint32_t bias = o->bias ? (uint32_t)o->bias[c] : 0u;
        dw_out out = {&st, &o->rq[c], 0, 0};
        for (int32_t b = 0; b < s->n; b++) {
            fill_plane(&g, x + (b * s->c_in + c) * plane_in, -z_x, u);
            correlate(&g, u, wp, bias, o->y + (b * s->c_out + c) * plane_out, &out, acc);
        }
    }
    o->vmin = st.vmin;
    o->vmax = st.vmax;
}

/* The input gradient (stride 1): the output gradient's plane correlated with the flipped
 * kernel, padding kh - 1 - pad_top and kw - 1 - pad_left, an output per input position. */
static dw_geom grad_geom(const poet_s8_conv_shape *s)
{
    return orient(s->h_out, s->w_out, s->h_in, s->w_in, s->kh, s->kw, 1, 1, s->kh - 1 - s->pad_top,
                  s->kw - 1 - s->pad_left);
}

int32_t s8_dw_grad_ws(const poet_s8_conv_shape *s)
{
    dw_geom g = grad_geom(s);
    return weight_words_bytes(s->kh, s->kw) + plane_bytes(&g) + sums_bytes(&g);
}

void s8_dw_grad(const poet_s8_conv_shape *s, const int8_t *grad, const int8_t *w, const int16_t *rescale,
                s8_grad_out *o, void *ws)
{
    dw_geom g = grad_geom(s);
    uint32_t *wp = (uint32_t *)ws;
    int16_t *u = (int16_t *)((uint8_t *)ws + weight_words_bytes(s->kh, s->kw));
    uint32_t *acc = (uint32_t *)((uint8_t *)u + plane_bytes(&g));
    int32_t plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    dw_out out = {0, 0, &o->ms, &o->amax};
    zero_plane(&g, u);
    for (int32_t c = 0; c < s->c_in; c++) {
        weight_words(&g, w + c * s->kh * s->kw, 1, rescale[c], wp);
        for (int32_t b = 0; b < s->n; b++) {
            fill_plane(&g, grad + (b * s->c_out + c) * plane_out, 0, u);
            correlate(&g, u, wp, 0u, o->g_x + (b * s->c_in + c) * plane_in, &out, acc);
        }
    }
}

/* The weight gradient: the input plane as in the forward, and the gradient in the same
 * orientation, n_l lanes of n_t padded to even with zeros (at the input's stride). */
int32_t s8_dw_wgrad_ws(const poet_s8_conv_shape *s)
{
    dw_geom g = forward_geom(s);
    return plane_bytes(&g) + s8_ws_part(2 * g.n_l * g.stride) + s8_ws_part(4 * s->kh * s->kw);
}

/* sums[lt] += the products of tap lane dl, taps 0..k_t-1 over the plane pair (u, v). */
static void tap_sums(const dw_geom *g, const int16_t *u, const int16_t *v, int32_t dl, uint32_t *sums)
{
    for (int32_t l = 0; l < g->n_l; l++) {
        const int16_t *gr = v + l * g->stride, *xr = u + (l * g->s_l + dl) * g->stride;
        if (g->s_t == 1 && g->k_t == 3) { /* the three taps share the gradient's word and two inputs */
            uint32_t s0 = sums[0], s1 = sums[1], s2 = sums[2], x0 = s8_load32(xr);
            for (int32_t t = 0; t < g->n_t; t += 2) {
                uint32_t gv = s8_load32(gr + t), x1 = s8_load32(xr + t + 1), x2 = s8_load32(xr + t + 2);
                s0 = s8_smlad(gv, x0, s0), s1 = s8_smlad(gv, x1, s1), s2 = s8_smlad(gv, x2, s2);
                x0 = x2;
            }
            sums[0] = s0, sums[1] = s1, sums[2] = s2;
            continue;
        }
        for (int32_t j = 0; j < g->k_t; j++) {
            uint32_t acc = sums[j];
            if (g->s_t == 1) {
                for (int32_t t = 0; t < g->n_t; t += 2) acc = s8_smlad(s8_load32(gr + t), s8_load32(xr + t + j), acc);
            } else {
                for (int32_t t = 0; t < g->n_t; t++) acc += (uint32_t)(gr[t] * xr[t * g->s_t + j]);
            }
            sums[j] = acc;
        }
    }
}

void s8_dw_wgrad(const poet_s8_conv_shape *s, const int8_t *grad, const int8_t *x, int32_t z_x, int32_t c0, int32_t c1,
                 int32_t *gw, void *ws)
{
    dw_geom g = forward_geom(s);
    int16_t *u = (int16_t *)ws;
    int16_t *v = (int16_t *)((uint8_t *)ws + plane_bytes(&g));
    uint32_t *sums = (uint32_t *)((uint8_t *)v + s8_ws_part(2 * g.n_l * g.stride));
    dw_geom gg = g; /* the gradient plane: no border, outputs at their own places */
    gg.p_l = gg.p_t = 0, gg.in_l = g.n_l, gg.in_t = g.n_t;
    int32_t taps = s->kh * s->kw, plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    zero_plane(&g, u);
    for (int32_t i = 0; i < g.n_l * g.stride; i++) v[i] = 0;
    for (int32_t c = c0; c < c1; c++) {
        for (int32_t t = 0; t < taps; t++) sums[t] = 0;
        for (int32_t b = 0; b < s->n; b++) {
            fill_plane(&g, x + (b * s->c_in + c) * plane_in, -z_x, u);
            fill_plane(&gg, grad + (b * s->c_out + c) * plane_out, 0, v);
            for (int32_t dl = 0; dl < g.k_l; dl++) tap_sums(&g, u, v, dl, sums + dl * g.k_t);
        }
        int32_t *out = gw + (c - c0) * taps;
        for (int32_t l = 0; l < g.k_l; l++)
            for (int32_t t = 0; t < g.k_t; t++)
                out[g.transposed ? t * g.k_l + l : l * g.k_t + t] = (int32_t)sums[l * g.k_t + t];
    }
}
