/* s8_conv.h - what the int8 convolution files share (internal to runtime/c/kernels/int8). */
#ifndef S8_CONV_H
#define S8_CONV_H

#include "poet_kernels_s8.h"
#include "s8_gemm.h"

/* groups == c_in == c_out: one filter per channel (conv_dw_s8.c). */
S8_INLINE int32_t s8_is_depthwise(const poet_s8_conv_shape *s)
{
    return s->groups > 1 && s->groups == s->c_in && s->groups == s->c_out;
}

/* The forward's prepared requantizations lead its workspace. */
S8_INLINE int32_t s8_rq_table_bytes(const poet_s8_conv_shape *s) { return s8_ws_part((int32_t)sizeof(s8_rq) * s->c_out); }

/* Depthwise forward: y per channel with o->rq[channel]. */
int32_t s8_dw_fwd_ws(const poet_s8_conv_shape *s);
void s8_dw_fwd(const poet_s8_conv_shape *s, const int8_t *x, int32_t z_x, const int8_t *w, s8_fwd_out *o, void *ws);
/* Depthwise input gradient, stride 1. */
int32_t s8_dw_grad_ws(const poet_s8_conv_shape *s);
void s8_dw_grad(const poet_s8_conv_shape *s, const int8_t *g, const int8_t *w, const int16_t *rescale, s8_grad_out *o,
                void *ws);
/* Depthwise weight gradients of channels [c0, c1). */
int32_t s8_dw_wgrad_ws(const poet_s8_conv_shape *s);
void s8_dw_wgrad(const poet_s8_conv_shape *s, const int8_t *g, const int8_t *x, int32_t z_x, int32_t c0, int32_t c1,
                 int32_t *gw, void *ws);

#endif
