/* pool_s8.c - int8 max and average pooling, forward and backward (docs/int8.md).
 *
 * Windows hold only the input positions inside the plane (padding is no position).
 * The backward kernels gather: each input sums what the windows holding it send, in
 * int32, then saturates once, so overlapping windows need no scratch; a max pooling
 * with disjoint windows (stride >= kernel, the 2x2/2 of the MCU models) writes each
 * window's gradient once instead. */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

/* The windows [lo, hi) of one axis holding input index r: o * stride - pad <= r < o * stride - pad + k. */
static void holding(int32_t r, int32_t k, int32_t stride, int32_t pad, int32_t n_out, int32_t *lo, int32_t *hi)
{
    int32_t top = r + pad; /* o * stride <= top and o * stride > top - k */
    *hi = s8_min(top / stride + 1, n_out);
    int32_t first = top - k + 1;
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
}

/* The valid rows [*r0, *r1) and columns [*c0, *c1) of window (oh, ow). */
static void window_box(const poet_s8_pool_shape *s, int32_t oh, int32_t ow, int32_t *r0, int32_t *r1, int32_t *c0,
                       int32_t *c1)
{
    int32_t r = oh * s->stride_h - s->pad_top, c = ow * s->stride_w - s->pad_left;
    *r0 = s8_max(r, 0);
    *r1 = s8_min(r + s->kh, s->h_in);
    *c0 = s8_max(c, 0);
    *c1 = s8_min(c + s->kw, s->w_in);
}

/* Index in the plane of the first maximum of window (oh, ow) (row-major), -1 if empty. */
static int32_t first_max(const poet_s8_pool_shape *s, const int8_t *x, int32_t oh, int32_t ow)
{
    int32_t r0, r1, c0, c1, best = -129, at = -1;
    window_box(s, oh, ow, &r0, &r1, &c0, &c1);
    for (int32_t r = r0; r < r1; r++)
        for (int32_t c = c0; c < c1; c++)
            if (x[r * s->w_in + c] > best) {
                best = x[r * s->w_in + c];
                at = r * s->w_in + c;
            }
    return at;
}

void poet_s8_maxpool_fwd(const poet_s8_pool_shape *s, const int8_t *x, int8_t *y)
{
    int32_t pin = s->h_in * s->w_in, pout = s->h_out * s->w_out;
    for (int32_t p = 0; p < s->n * s->c; p++, x += pin, y += pout)
        for (int32_t oh = 0; oh < s->h_out; oh++)
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                int32_t at = first_max(s, x, oh, ow);
                y[oh * s->w_out + ow] = at >= 0 ? x[at] : (int8_t)-128;
            }
}

void poet_s8_maxpool_bwd(const poet_s8_pool_shape *s, const int8_t *g_y, const int8_t *x, int8_t *g_x)
{
    int32_t pin = s->h_in * s->w_in, pout = s->h_out * s->w_out;
    int32_t disjoint = s->stride_h >= s->kh && s->stride_w >= s->kw;
    for (int32_t p = 0; p < s->n * s->c; p++, x += pin, g_y += pout, g_x += pin) {
        if (disjoint) {
            for (int32_t t = 0; t < pin; t++) g_x[t] = 0;
            for (int32_t oh = 0; oh < s->h_out; oh++)
                for (int32_t ow = 0; ow < s->w_out; ow++) {
                    int32_t at = first_max(s, x, oh, ow);
                    if (at >= 0) g_x[at] = (int8_t)s8_sat(g_y[oh * s->w_out + ow], -127, 127);
                }
            continue;
        }
        for (int32_t r = 0; r < s->h_in; r++)
            for (int32_t c = 0; c < s->w_in; c++) {
                int32_t oh0, oh1, ow0, ow1, sum = 0;
                holding(r, s->kh, s->stride_h, s->pad_top, s->h_out, &oh0, &oh1);
                holding(c, s->kw, s->stride_w, s->pad_left, s->w_out, &ow0, &ow1);
                for (int32_t oh = oh0; oh < oh1; oh++)
                    for (int32_t ow = ow0; ow < ow1; ow++)
                        if (first_max(s, x, oh, ow) == r * s->w_in + c) sum += g_y[oh * s->w_out + ow];
                g_x[r * s->w_in + c] = (int8_t)s8_sat(sum, -127, 127);
            }
    }
}

static int32_t window_count(const poet_s8_pool_shape *s, int32_t oh, int32_t ow)
{
    int32_t r0, r1, c0, c1;
    window_box(s, oh, ow, &r0, &r1, &c0, &c1);
    return s8_max(r1 - r0, 0) * s8_max(c1 - c0, 0);
}

/* a / d rounded half away from zero, d > 0 (0 when d is 0: an empty window). */
static int64_t round_div(int64_t a, int32_t d)
{
    if (d <= 0)
        return 0;
    int64_t m = (a < 0 ? -a : a) + d / 2;
    return a < 0 ? -(m / d) : m / d;
}

void poet_s8_avgpool_fwd(const poet_s8_pool_shape *s, int32_t z_x, int32_t z_y, int32_t multiplier, int32_t shift,
                         const int8_t *x, int8_t *y, int32_t vrange[2])
{
    int32_t pin = s->h_in * s->w_in, pout = s->h_out * s->w_out;
    int32_t lo = S8_INT32_MAX, hi = S8_INT32_MIN;
    for (int32_t p = 0; p < s->n * s->c; p++, x += pin, y += pout)
        for (int32_t oh = 0; oh < s->h_out; oh++)
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                int32_t r0, r1, c0, c1, total = 0;
                window_box(s, oh, ow, &r0, &r1, &c0, &c1);
                for (int32_t r = r0; r < r1; r++)
                    for (int32_t c = c0; c < c1; c++) total += x[r * s->w_in + c] - z_x;
                int32_t mean = (int32_t)round_div(total, window_count(s, oh, ow));
                int32_t v = s8_requantize(mean, multiplier, shift);
                lo = s8_min(lo, v);
                hi = s8_max(hi, v);
                y[oh * s->w_out + ow] = (int8_t)s8_sat64((int64_t)v + z_y, -128, 127);
            }
    if (lo <= hi)
        s8_range_merge(vrange, lo, hi);
}

int32_t poet_s8_avgpool_grad_shift(const poet_s8_pool_shape *s)
{
    int32_t most = 0;
    for (int32_t oh = 0; oh < s->h_out; oh++)
        for (int32_t ow = 0; ow < s->w_out; ow++) most = s8_max(most, window_count(s, oh, ow));
    return s8_nbits((uint32_t)most) - 1;
}

void poet_s8_avgpool_bwd(const poet_s8_pool_shape *s, const int8_t *g_y, int8_t *g_x)
{
    int32_t k = s8_max(poet_s8_avgpool_grad_shift(s), 0);
    int32_t pin = s->h_in * s->w_in, pout = s->h_out * s->w_out;
    for (int32_t p = 0; p < s->n * s->c; p++, g_y += pout, g_x += pin)
        for (int32_t r = 0; r < s->h_in; r++)
            for (int32_t c = 0; c < s->w_in; c++) {
                int32_t oh0, oh1, ow0, ow1;
                int64_t sum = 0;
                holding(r, s->kh, s->stride_h, s->pad_top, s->h_out, &oh0, &oh1);
                holding(c, s->kw, s->stride_w, s->pad_left, s->w_out, &ow0, &ow1);
                for (int32_t oh = oh0; oh < oh1; oh++)
                    for (int32_t ow = ow0; ow < ow1; ow++)
                        sum += round_div((int64_t)g_y[oh * s->w_out + ow] * ((int64_t)1 << k), window_count(s, oh, ow));
                g_x[r * s->w_in + c] = (int8_t)s8_sat64(sum, -127, 127);
            }
}
