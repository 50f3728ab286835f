/* conv_bwd_input_s8.c - int8 convolution and linear input gradient (docs/int8.md,
 * "Conv / linear input gradient").
 *
 * acc = sum_{c, kh, kw} W[c, i, kh, kw] * g[c] * R[c] (the transposed convolution of
 * the masked output gradient), g_x = sat(mul_shift(acc, M_g, n), +-127), amax.
 * R[c] is folded into the packed weights: W * R fits int16 (|.| <= 127 * 256) and the
 * products are exact, so sum (W R) g = sum W (g R) bit for bit, and the columns are
 * the int8 gradient widened, with no multiply per element.
 *
 * Stride 1 is a correlation of g with the flipped, transposed weights (padding
 * kh - 1 - pad_top, kw - 1 - pad_left), run by the packed driver of s8_gemm.c or, for
 * a depthwise layer, by conv_dw_s8.c. A strided layer's input gradient (a first layer's,
 * which training never needs, or a strided downsampling) runs the plain sum of the
 * definition. */
#include "s8_conv.h"

static s8_corr transposed_corr(const poet_s8_conv_shape *s, const int8_t *g)
{
    s8_corr c = {s->n,  s->c_out, s->h_out, s->w_out, s->c_in, s->h_in, s->w_in, s->kh, s->kw, 1, 1,
                 s->kh - 1 - s->pad_top, s->kw - 1 - s->pad_left, s->groups, 0, g};
    return c;
}

static int32_t strided(const poet_s8_conv_shape *s) { return s->stride_h != 1 || s->stride_w != 1; }

int32_t poet_s8_conv_bwd_input_ws(const poet_s8_conv_shape *s)
{
    if (strided(s))
        return 0;
    if (s8_is_depthwise(s))
        return s8_dw_grad_ws(s);
    s8_corr c = transposed_corr(s, 0);
    return s8_corr_ws(&c);
}

typedef struct flipped_rows {
    const poet_s8_conv_shape *s;
    const int8_t *w;
    const int16_t *rescale;
} flipped_rows;

/* A of group g: rows = its input channels, K = (output channel of the group, i, j),
 * A[ci][co, i, j] = W[co, ci, kh - 1 - i, kw - 1 - j] * R[co]. */
static void pack_flipped(void *ctx, int32_t group, int16_t *a)
{
    const flipped_rows *p = (const flipped_rows *)ctx;
    const poet_s8_conv_shape *s = p->s;
    int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups, taps = s->kh * s->kw;
    int32_t k = cout_g * taps, k4 = s8_round4(k);
    for (int32_t r = 0; r < s8_round2(cin_g); r++) {
        int16_t *d = a + (r >> 1) * 2 * k4 + (r & 1) * 4;
        for (int32_t t = 0; t < k4; t++) {
            int32_t v = 0;
            if (r < cin_g && t < k) {
                int32_t co = group * cout_g + t / taps, tap = taps - 1 - t % taps;
                v = (int32_t)p->w[(co * cin_g + r) * taps + tap] * p->rescale[co];
            }
            d[s8_slot(t)] = (int16_t)v;
        }
    }
}

/* Any stride: g_x[ci, r, c] sums the outputs whose window holds (r, c). */
static void plain_input_grad(const poet_s8_conv_shape *s, const poet_s8_grad_requant *q, const int8_t *g,
                             const int8_t *w, int8_t *g_x, s8_grad_out *o)
{
    int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    for (int32_t b = 0; b < s->n; b++)
        for (int32_t ci = 0; ci < s->c_in; ci++) {
            int32_t group = ci / cin_g;
            for (int32_t r = 0; r < s->h_in; r++)
                for (int32_t c = 0; c < s->w_in; c++) {
                    uint32_t acc = 0;
                    for (int32_t co = group * cout_g; co < (group + 1) * cout_g; co++) {
                        const int8_t *gp = g + (b * s->c_out + co) * s->h_out * s->w_out;
                        const int8_t *wp = w + (co * cin_g + ci - group * cin_g) * s->kh * s->kw;
                        for (int32_t i = 0; i < s->kh; i++) {
                            int32_t t = r + s->pad_top - i;
                            if (t < 0 || t % s->stride_h || t / s->stride_h >= s->h_out) continue;
                            for (int32_t j = 0; j < s->kw; j++) {
                                int32_t u = c + s->pad_left - j;
                                if (u < 0 || u % s->stride_w || u / s->stride_w >= s->w_out) continue;
                                int32_t gv = gp[(t / s->stride_h) * s->w_out + u / s->stride_w] * q->rescale[co];
                                acc += (uint32_t)(wp[i * s->kw + j] * gv);
                            }
                        }
                    }
                    g_x[((b * s->c_in + ci) * s->h_in + r) * s->w_in + c] = s8_grad_one(&o->ms, &o->amax, acc);
                }
        }
}

void poet_s8_conv_bwd_input(const poet_s8_conv_shape *s, const poet_s8_grad_requant *q, const int8_t *g,
                            const int8_t *w, int8_t *g_x, uint32_t *amax, void *ws)
{
    s8_grad_out o = {s8_ms_prepare(q->multiplier, q->n), g_x, 0};
    if (strided(s)) {
        plain_input_grad(s, q, g, w, g_x, &o);
    } else if (s8_is_depthwise(s)) {
        s8_dw_grad(s, g, w, q->rescale, &o, ws);
    } else {
        s8_corr c = transposed_corr(s, g);
        flipped_rows p = {s, w, q->rescale};
        s8_corr_grad(&c, pack_flipped, &p, &o, ws);
    }
    if (o.amax > *amax)
        *amax = o.amax;
}
