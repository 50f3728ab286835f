/* conv_dw_s8.c - int8 depthwise convolution (groups == c_in == c_out): forward, input
 * gradient (stride 1) and weight gradient.
 *
 * One channel at a time, its plane is widened once into int16 with the padding
 * written as 0 (x - z_x, or the gradient), so no loop tests a bound: an output is
 * kh rows of SMLAD over pairs of neighbouring taps, each pair one (unaligned) word of the
 * plane against a word of two weights (an odd last tap is paired with a zero weight and
 * the plane has a spare column). The input gradient is the same correlation over the
 * gradient plane with the kernel flipped and R[c] folded into the weights. The weight
 * gradient pairs neighbouring output columns: a word of two gradients against the word
 * of the two inputs each tap reads (stride 1; a strided layer sums one product at a
 * time). */
#include "s8_conv.h"

/* A plane of rows x cols int16 with rows of `stride` elements. */
typedef struct plane {
    int16_t *p;
    int32_t rows, cols, stride;
} plane;

/* plane[t][u] = src[t - top][u - left] + offset inside src (h x w), 0 elsewhere. */
static void widen(plane d, const int8_t *src, int32_t h, int32_t w, int32_t top, int32_t left, int32_t offset)
{
    for (int32_t t = 0; t < d.rows; t++) {
        int16_t *row = d.p + t * d.stride;
        int32_t r = t - top;
        for (int32_t u = 0; u < d.stride; u++) {
            int32_t c = u - left;
            row[u] = (int16_t)((r >= 0 && r < h && c >= 0 && c < w && u < d.cols) ? src[r * w + c] + offset : 0);
        }
    }
}

/* The weights of one channel as pairs per kernel row: wp[i][jp] = (w[i][2jp], w[i][2jp+1] or 0),
 * read flipped (w[kh-1-i][kw-1-j]) when `flip`, each times `scale`. */
static void weight_pairs(const int8_t *w, int32_t kh, int32_t kw, int32_t flip, int32_t scale, uint32_t *wp)
{
    int32_t kwp = (kw + 1) >> 1;
    for (int32_t i = 0; i < kh; i++)
        for (int32_t jp = 0; jp < kwp; jp++) {
            int32_t v[2];
            for (int32_t h = 0; h < 2; h++) {
                int32_t j = 2 * jp + h;
                v[h] = j < kw ? w[flip ? (kh - 1 - i) * kw + (kw - 1 - j) : i * kw + j] * scale : 0;
            }
            wp[i * kwp + jp] = s8_pair(v[0], v[1]);
        }
}

/* sum over the kernel of the plane at output (r, c) */
S8_INLINE uint32_t window(const plane *u, const uint32_t *wp, int32_t kh, int32_t kwp, int32_t r0, int32_t c0,
                          uint32_t acc)
{
    for (int32_t i = 0; i < kh; i++) {
        const int16_t *row = u->p + (r0 + i) * u->stride + c0;
        for (int32_t jp = 0; jp < kwp; jp++) acc = s8_smlad(s8_load32(row + 2 * jp), wp[i * kwp + jp], acc);
    }
    return acc;
}

/* The padded input plane of a channel: (h_out - 1) * stride + kh rows, and the columns
 * (w_out - 1) * stride + kw plus the spare one, or what the weight gradient's column pairs
 * read, whichever is wider. */
static plane input_plane(const poet_s8_conv_shape *s, int16_t *p)
{
    plane u = {p, (s->h_out - 1) * s->stride_h + s->kh, (s->w_out - 1) * s->stride_w + s->kw, 0};
    u.stride = s8_max(u.cols + 1, s8_round2(s->w_out) * s->stride_w + s->kw);
    return u;
}

S8_INLINE int32_t pairs_bytes(const poet_s8_conv_shape *s) { return s8_ws_part(4 * s->kh * ((s->kw + 1) >> 1)); }

int32_t s8_dw_fwd_ws(const poet_s8_conv_shape *s)
{
    plane u = input_plane(s, 0);
    return pairs_bytes(s) + s8_ws_part(2 * u.rows * u.stride);
}

void s8_dw_fwd(const poet_s8_conv_shape *s, const int8_t *x, int32_t z_x, const int8_t *w, s8_fwd_out *o, void *ws)
{
    uint32_t *wp = (uint32_t *)ws;
    plane u = input_plane(s, (int16_t *)((uint8_t *)ws + pairs_bytes(s)));
    int32_t kwp = (s->kw + 1) >> 1, plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    for (int32_t b = 0; b < s->n; b++)
        for (int32_t c = 0; c < s->c_out; c++) {
            weight_pairs(w + c * s->kh * s->kw, s->kh, s->kw, 0, 1, wp);
            widen(u, x + (b * s->c_in + c) * plane_in, s->h_in, s->w_in, s->pad_top, s->pad_left, -z_x);
            uint32_t bias = o->bias ? (uint32_t)o->bias[c] : 0u;
            int8_t *y = o->y + (b * s->c_out + c) * plane_out;
            for (int32_t r = 0; r < s->h_out; r++)
                for (int32_t col = 0; col < s->w_out; col++) {
                    uint32_t acc = window(&u, wp, s->kh, kwp, r * s->stride_h, col * s->stride_w, bias);
                    y[r * s->w_out + col] = s8_fwd_one(o, &o->rq[c], acc);
                }
        }
}

/* The input gradient's plane: the output gradient padded by kh - 1 - pad_top rows and
 * kw - 1 - pad_left columns, as wide as the input's correlation reads (stride 1). */
static plane grad_plane(const poet_s8_conv_shape *s, int16_t *p)
{
    plane u = {p, s->h_in - 1 + s->kh, s->w_in - 1 + s->kw, 0};
    u.stride = u.cols + 1;
    return u;
}

int32_t s8_dw_grad_ws(const poet_s8_conv_shape *s)
{
    plane u = grad_plane(s, 0);
    return pairs_bytes(s) + s8_ws_part(2 * u.rows * u.stride);
}

void s8_dw_grad(const poet_s8_conv_shape *s, const int8_t *g, const int8_t *w, const int16_t *rescale, s8_grad_out *o,
                void *ws)
{
    uint32_t *wp = (uint32_t *)ws;
    plane u = grad_plane(s, (int16_t *)((uint8_t *)ws + pairs_bytes(s)));
    int32_t kwp = (s->kw + 1) >> 1, plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    for (int32_t b = 0; b < s->n; b++)
        for (int32_t c = 0; c < s->c_in; c++) {
            weight_pairs(w + c * s->kh * s->kw, s->kh, s->kw, 1, rescale[c], wp);
            widen(u, g + (b * s->c_out + c) * plane_out, s->h_out, s->w_out, s->kh - 1 - s->pad_top,
                  s->kw - 1 - s->pad_left, 0);
            int8_t *gx = o->g_x + (b * s->c_in + c) * plane_in;
            for (int32_t r = 0; r < s->h_in; r++)
                for (int32_t col = 0; col < s->w_in; col++)
                    gx[r * s->w_in + col] = s8_grad_one(o, window(&u, wp, s->kh, kwp, r, col, 0u));
        }
}

/* The weight gradient's gradient plane: h_out rows of w_out columns padded to even. */
static plane out_plane(const poet_s8_conv_shape *s, int16_t *p)
{
    plane v = {p, s->h_out, s->w_out, s8_round2(s->w_out)};
    return v;
}

int32_t s8_dw_wgrad_ws(const poet_s8_conv_shape *s)
{
    plane u = input_plane(s, 0), v = out_plane(s, 0);
    return s8_ws_part(2 * u.rows * u.stride) + s8_ws_part(2 * v.rows * v.stride);
}

void s8_dw_wgrad(const poet_s8_conv_shape *s, const int8_t *g, const int8_t *x, int32_t z_x, int32_t c0, int32_t c1,
                 int32_t *gw, void *ws)
{
    plane u = input_plane(s, (int16_t *)ws);
    plane v = out_plane(s, (int16_t *)((uint8_t *)ws + s8_ws_part(2 * u.rows * u.stride)));
    int32_t taps = s->kh * s->kw, plane_in = s->h_in * s->w_in, plane_out = s->h_out * s->w_out;
    int32_t unit = s->stride_w == 1;
    for (int32_t c = c0; c < c1; c++) {
        int32_t *out = gw + (c - c0) * taps;
        for (int32_t t = 0; t < taps; t++) out[t] = 0;
        for (int32_t b = 0; b < s->n; b++) {
            widen(u, x + (b * s->c_in + c) * plane_in, s->h_in, s->w_in, s->pad_top, s->pad_left, -z_x);
            widen(v, g + (b * s->c_out + c) * plane_out, s->h_out, s->w_out, 0, 0, 0);
            for (int32_t i = 0; i < s->kh; i++)
                for (int32_t j = 0; j < s->kw; j++) {
                    uint32_t acc = (uint32_t)out[i * s->kw + j];
                    for (int32_t r = 0; r < s->h_out; r++) {
                        const int16_t *gr = v.p + r * v.stride;
                        const int16_t *xr = u.p + (r * s->stride_h + i) * u.stride + j;
                        if (unit) {
                            for (int32_t col = 0; col < v.stride; col += 2)
                                acc = s8_smlad(s8_load32(gr + col), s8_load32(xr + col), acc);
                        } else {
                            for (int32_t col = 0; col < s->w_out; col++)
                                acc += (uint32_t)(gr[col] * xr[col * s->stride_w]);
                        }
                    }
                    out[i * s->kw + j] = (int32_t)acc;
                }
        }
    }
}
