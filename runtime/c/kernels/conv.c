/* conv.c - 2-D convolution, forward and the three backward kernels (NCHW, float32).
 *
 * One grouped kernel covers the ordinary, depthwise (groups = channels) and pointwise
 * (1x1) convolutions of the MCU models; loops follow the definition in poet_kernels.h.
 * Loops run one kernel tap at a time over a whole output plane, so the innermost loop
 * is a multiply-accumulate along a row (what CMSIS-style code does, without its
 * unrolling); the input-gradient kernel visits exactly the (input, weight) pairs the
 * forward read, so padding and stride need no special cases beyond the bounds check. */
#include "poet_kernels.h"

/* Input row/column of output position o and kernel tap t, or -1 when it falls in the padding. */
static int32_t tap(int32_t o, int32_t t, int32_t stride, int32_t pad, int32_t dil, int32_t extent)
{
    int32_t i = o * stride - pad + t * dil;
    return (i >= 0 && i < extent) ? i : -1;
}

void poet_conv2d_fwd(const poet_conv2d_shape *s, const float *x, const float *w, const float *bias, float *y)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in;
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t co = 0; co < s->c_out; co++) {
            const int32_t g = co / cout_g;
            float *yc = y + ((int32_t)n * s->c_out + co) * out_plane;
            const float b = bias ? bias[co] : 0.0f;
            for (int32_t k = 0; k < out_plane; k++) yc[k] = b;
            /* One kernel tap at a time over the whole output plane: the inner loop is a
             * multiply-accumulate along a row, and each output still sums its terms in
             * the order of the definition (bias, then channel, row, column of the kernel). */
            for (int32_t cl = 0; cl < cin_g; cl++) {
                const float *xc = x + ((int32_t)n * s->c_in + g * cin_g + cl) * in_plane;
                const float *wk = w + ((int32_t)co * cin_g + cl) * s->kh * s->kw;
                for (int32_t i = 0; i < s->kh; i++) {
                    for (int32_t j = 0; j < s->kw; j++) {
                        const float wv = wk[i * s->kw + j];
                        for (int32_t oh = 0; oh < s->h_out; oh++) {
                            const int32_t ih = tap(oh, i, s->stride_h, s->pad_h, s->dil_h, s->h_in);
                            if (ih < 0) continue;
                            const float *xr = xc + ih * s->w_in;
                            float *yr = yc + oh * s->w_out;
                            for (int32_t ow = 0; ow < s->w_out; ow++) {
                                const int32_t iw = tap(ow, j, s->stride_w, s->pad_w, s->dil_w, s->w_in);
                                if (iw >= 0) yr[ow] += wv * xr[iw];
                            }
                        }
                    }
                }
            }
        }
    }
}

void poet_conv2d_bwd_input(const poet_conv2d_shape *s, const float *dy, const float *w, float *dx)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    const int32_t out_plane = s->h_out * s->w_out, in_plane = s->h_in * s->w_in;
    const int32_t dx_count = s->n * s->c_in * in_plane;
    for (int32_t k = 0; k < dx_count; k++) dx[k] = 0.0f;
    /* The transpose of the forward: every (output, tap) pair the forward read adds
     * weight * dy to the input element it read. */
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t co = 0; co < s->c_out; co++) {
            const int32_t g = co / cout_g;
            const float *dyc = dy + ((int32_t)n * s->c_out + co) * out_plane;
            for (int32_t cl = 0; cl < cin_g; cl++) {
                float *dxc = dx + ((int32_t)n * s->c_in + g * cin_g + cl) * in_plane;
                const float *wk = w + ((int32_t)co * cin_g + cl) * s->kh * s->kw;
                for (int32_t i = 0; i < s->kh; i++) {
                    for (int32_t j = 0; j < s->kw; j++) {
                        const float wv = wk[i * s->kw + j];
                        for (int32_t oh = 0; oh < s->h_out; oh++) {
                            const int32_t ih = tap(oh, i, s->stride_h, s->pad_h, s->dil_h, s->h_in);
                            if (ih < 0) continue;
                            float *dxr = dxc + ih * s->w_in;
                            const float *dyr = dyc + oh * s->w_out;
                            for (int32_t ow = 0; ow < s->w_out; ow++) {
                                const int32_t iw = tap(ow, j, s->stride_w, s->pad_w, s->dil_w, s->w_in);
                                if (iw >= 0) dxr[iw] += wv * dyr[ow];
                            }
                        }
                    }
                }
            }
        }
    }
}

void poet_conv2d_bwd_weight(const poet_conv2d_shape *s, const float *dy, const float *x, float *dw)
{
    const int32_t cin_g = s->c_in / s->groups, cout_g = s->c_out / s->groups;
    /* One weight at a time, summing over batch and output positions: each dw element is
     * one dot product, written once (no zeroing pass, no read-modify-write of dw). */
    for (int32_t co = 0; co < s->c_out; co++) {
        const int32_t g = co / cout_g;
        for (int32_t cl = 0; cl < cin_g; cl++) {
            for (int32_t i = 0; i < s->kh; i++) {
                for (int32_t j = 0; j < s->kw; j++) {
                    float acc = 0.0f;
                    for (int32_t n = 0; n < s->n; n++) {
                        const float *dyc = dy + ((int32_t)n * s->c_out + co) * s->h_out * s->w_out;
                        const float *xc = x + ((int32_t)n * s->c_in + g * cin_g + cl) * s->h_in * s->w_in;
                        for (int32_t oh = 0; oh < s->h_out; oh++) {
                            int32_t ih = tap(oh, i, s->stride_h, s->pad_h, s->dil_h, s->h_in);
                            if (ih < 0) continue;
                            for (int32_t ow = 0; ow < s->w_out; ow++) {
                                int32_t iw = tap(ow, j, s->stride_w, s->pad_w, s->dil_w, s->w_in);
                                if (iw < 0) continue;
                                acc += dyc[oh * s->w_out + ow] * xc[ih * s->w_in + iw];
                            }
                        }
                    }
                    dw[((co * cin_g + cl) * s->kh + i) * s->kw + j] = acc;
                }
            }
        }
    }
}

void poet_conv2d_bwd_bias(const poet_conv2d_shape *s, const float *dy, float *db)
{
    const int32_t plane = s->h_out * s->w_out;
    for (int32_t co = 0; co < s->c_out; co++) {
        float acc = 0.0f;
        for (int32_t n = 0; n < s->n; n++) {
            const float *dyc = dy + ((int32_t)n * s->c_out + co) * plane;
            for (int32_t k = 0; k < plane; k++) acc += dyc[k];
        }
        db[co] = acc;
    }
}
