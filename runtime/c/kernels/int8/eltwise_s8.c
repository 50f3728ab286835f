/* eltwise_s8.c - int8 residual add, activations and their masks, and the sum of two
 * gradients (docs/int8.md, "Add", "Activation mask", "A tensor read twice"). */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define S8_ADD_LEFT_SHIFT 20 /* TFLite's left shift of an int8 add's inputs */

void poet_s8_add_fwd(int32_t count, const poet_s8_add_quant *q, const int8_t *a, const int8_t *b, int8_t *y,
                     int32_t vrange[2])
{
    int32_t lo = S8_INT32_MAX, hi = S8_INT32_MIN;
    for (int32_t t = 0; t < count; t++) {
        int32_t sa = s8_requantize((int32_t)((uint32_t)(a[t] - q->z_a) << S8_ADD_LEFT_SHIFT), q->mult_a, q->shift_a);
        int32_t sb = s8_requantize((int32_t)((uint32_t)(b[t] - q->z_b) << S8_ADD_LEFT_SHIFT), q->mult_b, q->shift_b);
        int32_t v = s8_requantize((int32_t)((uint32_t)sa + (uint32_t)sb), q->mult_y, q->shift_y);
        lo = s8_min(lo, v);
        hi = s8_max(hi, v);
        y[t] = (int8_t)s8_sat64((int64_t)v + q->z_y, q->act_min, q->act_max);
    }
    if (lo <= hi)
        s8_range_merge(vrange, lo, hi);
}

void poet_s8_clamp(int32_t count, const int8_t *x, int32_t lo, int32_t hi, int8_t *y)
{
    for (int32_t t = 0; t < count; t++) y[t] = (int8_t)s8_sat(x[t], lo, hi);
}

void poet_s8_act_bwd(int32_t count, const poet_s8_act_mask *m, const int8_t *g_y, const int8_t *y, int8_t *g)
{
    int32_t lo = m->kind == POET_S8_ACT_NONE ? -129 : m->act_min;
    int32_t hi = m->kind == POET_S8_ACT_RELU6 ? m->act_max : 128;
    for (int32_t t = 0; t < count; t++) g[t] = (y[t] > lo && y[t] < hi) ? g_y[t] : 0;
}

int32_t poet_s8_grad_sum(int32_t count, const int8_t *g1, int32_t e1, const int8_t *g2, int32_t e2, int8_t *g)
{
    int32_t e = s8_min(e1, e2), d1 = e1 - e, d2 = e2 - e;
    uint32_t top = 0;
    for (int32_t t = 0; t < count; t++) {
        int32_t v = s8_dpot(g1[t], d1) + s8_dpot(g2[t], d2);
        uint32_t mag = (uint32_t)(v < 0 ? -v : v);
        if (mag > top) top = mag;
    }
    int32_t drop = s8_max(0, s8_nbits(top) - 7);
    for (int32_t t = 0; t < count; t++)
        g[t] = (int8_t)s8_sat(s8_dpot(s8_dpot(g1[t], d1) + s8_dpot(g2[t], d2), drop), -127, 127);
    return e - drop;
}
