/* conv_fwd_s8.c - int8 convolution and linear forward (docs/int8.md, "Conv / linear").
 *
 * acc = bias + sum W * (x - z_x) in int32 (wrap), v = requantize(acc, M[c], shift[c]),
 * y = sat(v + z_y, act_min, act_max), and the running range of v. Regular, pointwise,
 * grouped and linear layers run the packed correlation of s8_gemm.c; depthwise layers
 * the per-channel planes of conv_dw_s8.c. Each channel's requantization is prepared
 * once per call (s8_rq) into the head of the workspace. */
#include "s8_conv.h"

void poet_s8_range_init(int32_t vrange[2])
{
    vrange[0] = S8_INT32_MAX;
    vrange[1] = S8_INT32_MIN;
}

static s8_corr forward_corr(const poet_s8_conv_shape *s, const int8_t *x, int32_t z_x)
{
    s8_corr c = {s->n,  s->c_in,    s->h_in,     s->w_in,   s->c_out,  s->h_out, s->w_out, s->kh,
                 s->kw, s->stride_h, s->stride_w, s->pad_top, s->pad_left, s->groups, z_x,     x};
    return c;
}

int32_t poet_s8_conv_fwd_ws(const poet_s8_conv_shape *s)
{
    if (s8_is_depthwise(s))
        return s8_rq_table_bytes(s) + s8_dw_fwd_ws(s);
    s8_corr c = forward_corr(s, 0, 0);
    return s8_rq_table_bytes(s) + s8_corr_ws(&c);
}

typedef struct weight_rows {
    const int8_t *w;
    int32_t rows, k;
} weight_rows;

/* A of group g: its output channels' weights, rows of c_in / groups * kh * kw. */
static void pack_weights(void *ctx, int32_t group, int16_t *a)
{
    const weight_rows *p = (const weight_rows *)ctx;
    s8_pack_rows(p->rows, p->k, p->w + group * p->rows * p->k, p->k, a);
}

void poet_s8_conv_fwd(const poet_s8_conv_shape *s, const poet_s8_requant *q, const int8_t *x, const int8_t *w,
                      const int32_t *bias, int8_t *y, int32_t vrange[2], void *ws)
{
    s8_rq *rq = (s8_rq *)ws;
    void *rest = (uint8_t *)ws + s8_rq_table_bytes(s);
    for (int32_t c = 0; c < s->c_out; c++) rq[c] = s8_rq_prepare(q->multiplier[c], q->shift[c]);
    s8_fwd_out o = {bias, rq, q->z_y, q->act_min, q->act_max, y, S8_INT32_MAX, S8_INT32_MIN};
    if (s8_is_depthwise(s)) {
        s8_dw_fwd(s, x, q->z_x, w, &o, rest);
    } else {
        s8_corr c = forward_corr(s, x, q->z_x);
        weight_rows p = {w, s->c_out / s->groups, s->c_in / s->groups * s->kh * s->kw};
        s8_corr_fwd(&c, pack_weights, &p, &o, rest);
    }
    if (o.vmin <= o.vmax)
        s8_range_merge(vrange, o.vmin, o.vmax);
}
