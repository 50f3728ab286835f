/* pool.c - max and average pooling over NCHW planes, forward and backward. */
#include "poet_kernels.h"

void poet_maxpool2d_fwd(const poet_pool2d_shape *s, const float *x, float *y, int32_t *idx)
{
    const int32_t planes = s->n * s->c;
    for (int32_t p = 0; p < planes; p++) {
        const float *xp = x + p * s->h_in * s->w_in;
        for (int32_t oh = 0; oh < s->h_out; oh++) {
            for (int32_t ow = 0; ow < s->w_out; ow++) {
                int32_t best = -1;
                float best_v = 0.0f;
                for (int32_t i = 0; i < s->kh; i++) {
                    int32_t ih = oh * s->stride_h - s->pad_h + i * s->dil_h;
                    if (ih < 0 || ih >= s->h_in) continue;
                    for (int32_t j = 0; j < s->kw; j++) {
                        int32_t iw = ow * s->stride_w - s->pad_w + j * s->dil_w;
                        if (iw < 0 || iw >= s->w_in) continue;
                        float v = xp[ih * s->w_in + iw];
                        /* strictly greater: the first maximum wins, as in PyTorch; NaN propagates */
                        if (best < 0 || v > best_v || v != v) {
                            best = ih * s->w_in + iw;
                            best_v = v;
                        }
                    }
                }
                const int32_t o = (p * s->h_out + oh) * s->w_out + ow;
                y[o] = best_v;
                idx[o] = best;
            }
        }
    }
}

void poet_maxpool2d_bwd(const poet_pool2d_shape *s, const float *dy, const int32_t *idx, float *dx)
{
    const int32_t planes = s->n * s->c, in_plane = s->h_in * s->w_in, out_plane = s->h_out * s->w_out;
    for (int32_t k = 0; k < planes * in_plane; k++) dx[k] = 0.0f;
    for (int32_t p = 0; p < planes; p++)
        for (int32_t o = 0; o < out_plane; o++)
            if (idx[p * out_plane + o] >= 0) dx[p * in_plane + idx[p * out_plane + o]] += dy[p * out_plane + o];
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
