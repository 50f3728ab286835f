/*
 * poet_kernels_s8.h - int8 training kernels (forward and backward) for a Cortex-M.
 *
 * The arithmetic of every kernel is docs/int8.md's, to the bit: the host reference
 * (poet_compiler/quant/, integer NumPy) and these kernels give the same bytes on any
 * shape (tests/runtime/test_kernels_s8.py; on the emulated Cortex-M4 with its DSP
 * extension and on a Cortex-M3 without one, tests/runtime/test_kernels_s8_qemu.py).
 *
 * Conventions shared by every kernel:
 *   - tensors are contiguous NCHW (activations, gradients) and OIHW (weights, I = input
 *     channels per group); a linear layer is a 1x1 convolution over [N, K, 1, 1];
 *   - activations are int8 with a zero point, weights and gradients int8 in [-127, 127]
 *     (symmetric), biases and accumulators int32; every sum is reduced modulo 2^32
 *     (wrap-around), so tiling and unrolling change no bit;
 *   - no floating point, no malloc, no stdio: only <stdint.h> (and <arm_acle.h> where
 *     __ARM_FEATURE_DSP selects the Cortex-M4 path, which gives the portable path's bits);
 *   - scratch lives only in the caller's workspace `ws`, of the bytes that the kernel's
 *     `_ws` function returns (docs/int8.md, "Kernel interface"), 8-byte aligned; a
 *     kernel with no `_ws` function needs none;
 *   - outputs never alias inputs unless a kernel says so, and every output element is
 *     written, so a recomputation gives the same bytes;
 *   - "running" outputs (vrange, amax) are merged with what they hold, so the caller
 *     initialises them once per step (poet_s8_range_init) and any order of calls, any
 *     recomputation, gives the same value.
 */
#ifndef POET_KERNELS_S8_H
#define POET_KERNELS_S8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shapes -----------------------------------------------------------------------
 * A convolution: x [n, c_in, h_in, w_in], w [c_out, c_in / groups, kh, kw],
 * y [n, c_out, h_out, w_out]; y[.., oh, ow] reads x rows oh * stride_h - pad_top + i,
 * columns ow * stride_w - pad_left + j; positions outside x contribute 0 (they hold
 * the real value 0, the code z_x). The bottom and right padding follow from h_out and
 * w_out. groups == c_in == c_out is a depthwise convolution, kh == kw == 1 pointwise. */
typedef struct poet_s8_conv_shape {
    int32_t n, c_in, h_in, w_in;
    int32_t c_out, h_out, w_out;
    int32_t kh, kw, stride_h, stride_w, pad_top, pad_left, groups;
} poet_s8_conv_shape;

/* A fused activation and its mask in the backward: none passes every gradient, ReLU
 * where y > act_min (= z_y), ReLU6 where act_min < y < act_max (= q(6)). */
enum poet_s8_act { POET_S8_ACT_NONE = 0, POET_S8_ACT_RELU = 1, POET_S8_ACT_RELU6 = 2 };

typedef struct poet_s8_act_mask {
    int32_t kind, act_min, act_max;
} poet_s8_act_mask;

/* A running range: vrange[0] = min, vrange[1] = max of what a kernel records. */
void poet_s8_range_init(int32_t vrange[2]);

/* ---- convolution and linear, forward (conv_fwd_s8.c) --------------------------------
 * acc = wrap32(bias[c] + sum W[c, i, kh, kw] * (x - z_x))
 * v   = requantize(acc, multiplier[c], shift[c])       (CMSIS-NN arm_nn_requantize)
 * y   = sat(v + z_y, act_min, act_max)
 * shift[c] = shift0[c] + kW[c] + k_x - k_y; multiplier[c] in [0, 2^31). vrange: the
 * running min and max of v (docs/int8.md, "Delayed scaling"). bias NULL: 0. */
typedef struct poet_s8_requant {
    int32_t z_x, z_y, act_min, act_max;
    const int32_t *multiplier; /* [c_out] */
    const int32_t *shift;      /* [c_out] */
} poet_s8_requant;

int32_t poet_s8_conv_fwd_ws(const poet_s8_conv_shape *s);
void poet_s8_conv_fwd(const poet_s8_conv_shape *s, const poet_s8_requant *q, const int8_t *x, const int8_t *w,
                      const int32_t *bias, int8_t *y, int32_t vrange[2], void *ws);

/* ---- convolution and linear, input gradient (conv_bwd_input_s8.c) -------------------
 * g is the output gradient masked by the fused activation (poet_s8_act_bwd, which may
 * run in place on g_y before both backward kernels):
 * g~  = g * rescale[c]                                  (int16: |g~| <= 127 * 256)
 * acc = wrap32(sum_{c, kh, kw} W[c, i, kh, kw] * g~)    (the transposed convolution)
 * v   = mul_shift(acc, multiplier, n)    ((acc * M + 2^(n-1)) >> n; n > 62: 0; n < 1: 1)
 * g_x = sat(v, -127, 127);  amax = max(amax, min(|v|, 2^31 - 1))
 * n = 31 - sg - max kW + E_y - E_x. */
typedef struct poet_s8_grad_requant {
    const int16_t *rescale; /* R[c_out], in [1, 256] */
    int32_t multiplier, n;
} poet_s8_grad_requant;

int32_t poet_s8_conv_bwd_input_ws(const poet_s8_conv_shape *s);
void poet_s8_conv_bwd_input(const poet_s8_conv_shape *s, const poet_s8_grad_requant *q, const int8_t *g,
                            const int8_t *w, int8_t *g_x, uint32_t *amax, void *ws);

/* ---- convolution and linear, weight and bias gradients (conv_bwd_weight_s8.c) -------
 * GW[c, i, kh, kw] = wrap32(sum_{n, oh, ow} g[n, c, oh, ow] * (x[..] - z_x)), padding 0
 * Gb[c]            = wrap32(sum_{n, oh, ow} g[n, c, oh, ow])
 * with g the masked output gradient, for the output channels [co_begin, co_end): gw
 * holds (co_end - co_begin) * c_in / groups * kh * kw sums, gb co_end - co_begin (NULL:
 * not computed). A caller that updates channel by channel (docs/int8.md, "fused with
 * the update") passes small ranges and a small gw. */
int32_t poet_s8_conv_bwd_weight_ws(const poet_s8_conv_shape *s);
void poet_s8_conv_bwd_weight(const poet_s8_conv_shape *s, const int8_t *g, const int8_t *x, int32_t z_x,
                             int32_t co_begin, int32_t co_end, int32_t *gw, int32_t *gb, void *ws);

/* ---- pooling (pool_s8.c) -------------------------------------------------------------
 * Windows of kh x kw at stride, offset by the top/left padding; padded positions are
 * not part of a window. Max pooling keeps the input's QParams: y = max of the codes;
 * its gradient goes to the first maximal position of each window (row-major), summed
 * over overlapping windows, then saturated to [-127, 127]. Average pooling:
 * mean = round_half_away(sum(x - z_x) / count), v = requantize(mean, multiplier, shift)
 * (shift = shift0 + k_x - k_y), y = sat(v + z_y, -128, 127), vrange as conv_fwd's; its
 * gradient: each input receives round_half_away(g_y * 2^k / count) of every window
 * holding it (summed, saturated), k = poet_s8_avgpool_grad_shift (E_x = E_y + k). */
typedef struct poet_s8_pool_shape {
    int32_t n, c, h_in, w_in, h_out, w_out;
    int32_t kh, kw, stride_h, stride_w, pad_top, pad_left;
} poet_s8_pool_shape;

void poet_s8_maxpool_fwd(const poet_s8_pool_shape *s, const int8_t *x, int8_t *y);
void poet_s8_maxpool_bwd(const poet_s8_pool_shape *s, const int8_t *g_y, const int8_t *x, int8_t *g_x);
void poet_s8_avgpool_fwd(const poet_s8_pool_shape *s, int32_t z_x, int32_t z_y, int32_t multiplier, int32_t shift,
                         const int8_t *x, int8_t *y, int32_t vrange[2]);
int32_t poet_s8_avgpool_grad_shift(const poet_s8_pool_shape *s);
void poet_s8_avgpool_bwd(const poet_s8_pool_shape *s, const int8_t *g_y, int8_t *g_x);

/* ---- element-wise (eltwise_s8.c) ----------------------------------------------------
 * Residual add (TFLite/CMSIS-NN elementwise_add_s8 with exponents):
 *   a' = requantize(wrap32((a - z_a) << 20), mult_a, shift_a)   shift_a = sh_a + k_a - t
 *   b' = requantize(wrap32((b - z_b) << 20), mult_b, shift_b)   shift_b = sh_b + k_b - t
 *   v  = requantize(wrap32(a' + b'), mult_y, shift_y)            shift_y = sh_y + t - k_y
 *   y  = sat(v + z_y, act_min, act_max)                          t = max(k_a, k_b)
 * Its backward is poet_s8_act_bwd: both inputs receive the masked gradient. */
typedef struct poet_s8_add_quant {
    int32_t z_a, z_b, z_y, act_min, act_max;
    int32_t mult_a, shift_a, mult_b, shift_b, mult_y, shift_y;
} poet_s8_add_quant;

void poet_s8_add_fwd(int32_t count, const poet_s8_add_quant *q, const int8_t *a, const int8_t *b, int8_t *y,
                     int32_t vrange[2]);
/* A standalone activation: y = sat(x, lo, hi) (ReLU: lo = z, hi = 127; same QParams). */
void poet_s8_clamp(int32_t count, const int8_t *x, int32_t lo, int32_t hi, int8_t *y);
/* g = g_y where the mask of y passes, else 0; g may be g_y (in place). */
void poet_s8_act_bwd(int32_t count, const poet_s8_act_mask *m, const int8_t *g_y, const int8_t *y, int8_t *g);
/* The sum of the gradients of a tensor read twice, at exponents e1 and e2 (g = codes *
 * 2^-e): at e = min(e1, e2), s = rshift_round(g1, e1 - e) + rshift_round(g2, e2 - e),
 * d = max(0, nbits(max |s|) - 7), g = sat(rshift_round(s, d), +-127); returns e - d.
 * Two passes over the inputs, no scratch; g may be g1 or g2 (in place). */
int32_t poet_s8_grad_sum(int32_t count, const int8_t *g1, int32_t e1, const int8_t *g2, int32_t e2, int8_t *g);

/* ---- softmax cross-entropy (loss_s8.c) ----------------------------------------------
 * Per sample b, label t: m = max_j z[j], d_j = m - z_j, e_j = round(2^15 exp(-s_z d_j)) as
 * docs/int8.md computes it (t_j = mul_shift(d_j, m_e, n_e) in Q8, POW2[t_j & 255] >> (t_j >> 8)
 * rounded, 0 past 2^-15; n_e = 23 - sh_e - k_z), S = sum e_j,
 * P_j = (e_j * 2^15 + S / 2) / S, G_j = P_j - 2^15 [j == t],
 * L_b = ((log2q(S) - log2q(max(e_t, 1))) * 45426 + 2^15) >> 16 (Q16 nats).
 * Returns the batch's loss (sum L_b + batch / 2) / batch (Q16). The gradient:
 * r = max(0, nbits(max |G|) - 7), g = sat(rshift_round(G, r), +-127), *e_out = 15 - r.
 * ws: poet_s8_softmax_ce_ws bytes (the int32 G of the batch). A label outside
 * [0, classes) counts as e_t = 0 and subtracts nothing. */
int32_t poet_s8_softmax_ce_ws(int32_t batch, int32_t classes);
int32_t poet_s8_softmax_ce(int32_t batch, int32_t classes, const int8_t *logits, const int32_t *labels, int32_t m_e,
                           int32_t n_e, int8_t *g, int32_t *e_out, void *ws);
/* The Q16 log2 of v >= 1 (docs/int8.md, "Loss"). */
int32_t poet_s8_log2q(uint32_t v);

/* ---- the update (update_s8.c) --------------------------------------------------------
 * Per output channel c of a layer, in parameter LSBs (Q16):
 *   u   = sat(mul_shift(G, mult[c], n_c), +-2^23)    n_c = 31 - shift[c] + e_y - k_x + kW[c]
 *                                                     (weights; biases: + k_x + kW[c])
 *   momentum (mu_q15 != 0): p = buf * mu_q15, buf = sat(sign(p) (|p| >> 15) + rshift_round(u, 8),
 *                           +-limit), step8 = buf    (Q8; limit 32767 weights, 2^31 - 1 biases)
 *   without: step8 = rshift_round(u, 8)
 * Biases round to the nearest: b = sat(b - ((256 step8 + 2^15) >> 16), +-(2^31 - 1)) (u in
 * place of 256 step8 without momentum). A weight is its code q and residual r (int8), the
 * value q + r/256 LSBs: w = 256 q + r - step8; then its channel's exponent rule on the
 * nearest codes (w + 128) >> 8: any |code| > 127: w, bias, both momenta = rshift_round(., 1),
 * kW[c] += 1; all |code| < 32: doubled (momenta saturating), kW[c] -= 1; then
 * q = sat((w + 128) >> 8, +-127), r = sat(w - 256 q, -128, 127). The layer's bias update
 * runs first (it reads the old kW). Channels [c_begin, c_end) of gw/gb (which hold only
 * those channels). mom, bias, bias_mom: NULL when absent. gw is consumed: the weight
 * update keeps each channel's Q8 weights there until its exponent rule is decided (no
 * other scratch). Returns the number of weights whose code changed. */
typedef struct poet_s8_update {
    const int32_t *mult, *shift; /* per output channel: the host's (lr/B) scale as multiplier, shift */
    int32_t k_x, e_y, mu_q15;
} poet_s8_update;

void poet_s8_update_bias(const poet_s8_update *u, int32_t c_begin, int32_t c_end, const int32_t *kw,
                         const int32_t *gb, int32_t *bias, int32_t *mom);
int32_t poet_s8_update_weight(const poet_s8_update *u, int32_t c_begin, int32_t c_end, int32_t per_channel,
                              int32_t *gw, int8_t *w, int8_t *residual, int16_t *mom, int32_t *kw, int32_t *bias,
                              int32_t *bias_mom);

/* ---- exponent bookkeeping between steps (exponent_s8.c; docs/int8.md) --------------
 * The activation exponent k of a tensor from the step's vrange of v: k + 1 if
 * vmax > 127 - z or (not clamped below and vmin < -128 - z); else k - 1 if
 * vmax <= (127 - z) / 2 and (clamped below or vmin >= -((z + 128) / 2)); else k.
 * The delayed gradient exponent: e + 7 - nbits(amax) (e when amax = 0).
 * A bias (or bias momentum) whose input exponent moved by d: rshift_round(., d) for
 * d > 0, shifted left saturating to +-(2^31 - 1) for d < 0. */
int32_t poet_s8_next_act_exponent(int32_t k, const int32_t vrange[2], int32_t z, int32_t clamped_below);
int32_t poet_s8_next_grad_exponent(int32_t e, uint32_t amax);
void poet_s8_rescale_bias(int32_t count, int32_t *bias, int32_t d);

#ifdef __cplusplus
}
#endif

#endif
