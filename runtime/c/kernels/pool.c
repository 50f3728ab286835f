/* pool.c - max and average pooling over NCHW planes, forward and backward. */
#include "poet_kernels.h"

/* [*t0, *t1): the taps t < n with 0 <= base + t * step < extent. */
static void clip(int32_t base, int32_t step, int32_t n, int32_t extent, int32_t *t0, int32_t *t1)
{
    int32_t lo = 0, hi = n;
    while (lo < hi && base + lo * step < 0) lo++;
    while (hi > lo && base + (hi - 1) * step >= extent) hi--;
    *t0 = lo;
    *t1 = hi;
}

/* The first maximum wins (strictly greater replaces it), and a NaN replaces whatever is
 * there (PyTorch's rule: `val > max || isnan(val)`). */
#define POET_TAKE(v, i)                       \
    do {                                      \
        const float v_ = (v);                 \
        if (v_ > best_v || v_ != v_) {        \
            best_v = v_;                      \
            best = (i);                       \
        }                                     \
    } while (0)

/* 2x2 windows, stride 2, no padding (every window inside): one output per step. */
static void maxpool_2x2(const poet_pool2d_shape *s, const float *x, float *y, int32_t *idx)
{
    const int32_t planes = s->n * s->c, w = s->w_in;
    for (int32_t p = 0; p < planes; p++) {
        const float *xp = x + p * s->h_in * w;
        for (int32_t oh = 0; oh < s->h_out; oh++) {
            const float *r0 = xp + 2 * oh * w, *r1 = r0 + w;
            int32_t k = 2 * oh * w;
            for (int32_t ow = s->w_out; ow > 0; ow--, r0 += 2, r1 += 2, k += 2) {
                const float v0 = r0[0], v1 = r0[1], v2 = r1[0], v3 = r1[1];
                int32_t best = k;
                float best_v = v0;
                if (v1 > best_v) best_v = v1, best = k + 1;
                if (v2 > best_v) best_v = v2, best = k + w;
                if (v3 > best_v) best_v = v3, best = k + w + 1;
                /* A NaN makes the sum NaN (so can inf - inf): redo the window by the rule. */
                const float sum = (v0 + v1) + (v2 + v3);
                if (sum != sum) {
                    best = k, best_v = v0;
                    POET_TAKE(v1, k + 1);
                    POET_TAKE(v2, k + w);
                    POET_TAKE(v3, k + w + 1);
                }
                *y++ = best_v;
                *idx++ = best;
            }
        }
    }
}

void poet_maxpool2d_fwd(const poet_pool2d_shape *s, const float *x, float *y, int32_t *idx)
{
    if (s->kh == 2 && s->kw == 2 && s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 && s->pad_w == 0 &&
        s->dil_h == 1 && s->dil_w == 1) {
        maxpool_2x2(s, x, y, idx);
        return;
    }
    const int32_t planes = s->n * s->c, in_plane = s->h_in * s->w_in;
    for (int32_t p = 0; p < planes; p++) {
        const float *xp = x + p * in_plane;
        for (int32_t oh = 0; oh < s->h_out; oh++) {
            const int32_t ih0 = oh * s->stride_h - s->pad_h;
            int32_t i0, i1;
            clip(ih0, s->dil_h, s->kh, s->h_in, &i0, &i1);
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                const int32_t iw0 = ow * s->stride_w - s->pad_w;
                int32_t j0, j1, best = -1;
                float best_v = 0.0f;
                clip(iw0, s->dil_w, s->kw, s->w_in, &j0, &j1);
                for (int32_t i = i0; i < i1; i++) {
                    const int32_t row = (ih0 + i * s->dil_h) * s->w_in;
                    for (int32_t j = j0; j < j1; j++) {
                        const int32_t k = row + iw0 + j * s->dil_w;
                        if (best < 0) best = k, best_v = xp[k];
                        else POET_TAKE(xp[k], k);
                    }
                }
                *y++ = best_v;
                *idx++ = best;
            }
        }
    }
}

void poet_maxpool2d_bwd(const poet_pool2d_shape *s, const float *dy, const int32_t *idx, float *dx)
{
    const int32_t planes = s->n * s->c, in_plane = s->h_in * s->w_in, out_plane = s->h_out * s->w_out;
    for (int32_t k = 0; k < planes * in_plane; k++) dx[k] = 0.0f;
    for (int32_t p = 0; p < planes; p++) {
        float *dxp = dx + p * in_plane;
        const float *dyp = dy + p * out_plane;
        const int32_t *ip = idx + p * out_plane;
        for (int32_t o = 0; o < out_plane; o++)
            if (ip[o] >= 0) dxp[ip[o]] += dyp[o];
    }
}

void poet_avgpool2d_fwd(const poet_pool2d_shape *s, const float *x, float *y)
{
    const int32_t planes = s->n * s->c;
    const float count = (float)(s->kh * s->kw);
    for (int32_t p = 0; p < planes; p++) {
        const float *xp = x + p * s->h_in * s->w_in;
        for (int32_t oh = 0; oh < s->h_out; oh++) {
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                float acc = 0.0f;
                for (int32_t i = 0; i < s->kh; i++) {
                    int32_t ih = oh * s->stride_h - s->pad_h + i;
                    if (ih < 0 || ih >= s->h_in) continue;
                    for (int32_t j = 0; j < s->kw; j++) {
                        int32_t iw = ow * s->stride_w - s->pad_w + j;
                        if (iw >= 0 && iw < s->w_in) acc += xp[ih * s->w_in + iw];
                    }
                }
                y[(p * s->h_out + oh) * s->w_out + ow] = acc / count;
            }
        }
    }
}

void poet_avgpool2d_bwd(const poet_pool2d_shape *s, const float *dy, float *dx)
{
    const int32_t planes = s->n * s->c;
    const float count = (float)(s->kh * s->kw);
    for (int32_t k = 0; k < planes * s->h_in * s->w_in; k++) dx[k] = 0.0f;
    for (int32_t p = 0; p < planes; p++) {
        float *dxp = dx + p * s->h_in * s->w_in;
        for (int32_t oh = 0; oh < s->h_out; oh++) {
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                const float d = dy[(p * s->h_out + oh) * s->w_out + ow] / count;
                for (int32_t i = 0; i < s->kh; i++) {
                    int32_t ih = oh * s->stride_h - s->pad_h + i;
                    if (ih < 0 || ih >= s->h_in) continue;
                    for (int32_t j = 0; j < s->kw; j++) {
                        int32_t iw = ow * s->stride_w - s->pad_w + j;
                        if (iw >= 0 && iw < s->w_in) dxp[ih * s->w_in + iw] += d;
                    }
                }
            }
        }
    }
}
