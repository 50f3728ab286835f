/* update_s8.c - SGD applied in integers, with stochastic rounding from counter-based
 * draws, optional momentum, and the weight exponents' channel rule (docs/int8.md,
 * "Update", "Weight exponents").
 *
 * A draw is a pure function of (seed, step, tensor, element): MurmurHash3's finalizer
 * fmix32 of a per-tensor key plus the element's index. So the bits do not depend on
 * the order the schedule runs updates in, nor on how a kernel walks a tensor. */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define FRACTION_BITS 16
#define MOMENTUM_SHIFT 8            /* Q16 update -> Q8 momentum buffer */
#define UPDATE_LIMIT (1 << 23)      /* |u| at most 128 LSBs a step */
#define WEIGHT_UNCLAMPED 256        /* a code before its channel's rule: 127 + 128 + 1 */
#define WEIGHT_MOM_LIMIT 32767
#define SHRINK_BELOW 32

uint32_t poet_s8_fmix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

uint32_t poet_s8_draw_key(uint32_t seed, uint32_t step, uint32_t tensor)
{
    return poet_s8_fmix32(poet_s8_fmix32(seed + step) + tensor * 0x9E3779B9u);
}

/* u = sat(mul_shift(grad, mult, n), +-2^23), then through the momentum buffer when mu != 0. */
S8_INLINE int64_t scaled(int32_t grad, int32_t mult, int32_t n)
{
    int64_t u = s8_mul_shift(grad, mult, n);
    return u < -UPDATE_LIMIT ? -UPDATE_LIMIT : (u > UPDATE_LIMIT ? UPDATE_LIMIT : u);
}

S8_INLINE int64_t momentum(int64_t buf, int64_t u, int32_t mu_q15, int32_t limit)
{
    return s8_sat64(s8_dpot64(buf * mu_q15, 15) + s8_dpot64(u, MOMENTUM_SHIFT), -limit, limit);
}

/* q - floor((u + r) / 2^16), r the draw's top 16 bits. */
S8_INLINE int64_t rounded_step(int64_t q, int64_t u, uint32_t key, uint32_t index)
{
    uint32_t r = poet_s8_fmix32(key + index) >> (32 - FRACTION_BITS);
    return q - ((u + r) >> FRACTION_BITS);
}

void poet_s8_update_bias(const poet_s8_update *u, int32_t c_begin, int32_t c_end, const int32_t *kw,
                         const int32_t *gb, int32_t *bias, int32_t *mom)
{
    for (int32_t c = c_begin; c < c_end; c++) {
        int64_t step = scaled(gb[c - c_begin], u->mult[c], 31 - u->shift[c] + u->e_y + u->k_x + kw[c]);
        if (u->mu_q15 && mom) {
            mom[c] = (int32_t)momentum(mom[c], step, u->mu_q15, S8_INT32_MAX);
            step = (int64_t)mom[c] * (1 << (FRACTION_BITS - MOMENTUM_SHIFT));
        }
        bias[c] = s8_sat64(rounded_step(bias[c], step, u->key, (uint32_t)c), -S8_INT32_MAX, S8_INT32_MAX);
    }
}

/* x / 2 rounded (grow) or 2 x saturating (shrink) for a per-channel int32 quantity. */
static int32_t rescaled(int32_t v, int32_t change, int32_t limit)
{
    if (change > 0)
        return s8_dpot(v, 1);
    if (change < 0)
        return s8_sat64((int64_t)v * 2, -limit, limit);
    return v;
}

int32_t poet_s8_update_weight(const poet_s8_update *u, int32_t c_begin, int32_t c_end, int32_t per_channel,
                              int32_t *gw, int8_t *w, int16_t *mom, int32_t *kw, int32_t *bias, int32_t *bias_mom)
{
    int32_t changed = 0;
    for (int32_t c = c_begin; c < c_end; c++) {
        int32_t n = 31 - u->shift[c] + u->e_y - u->k_x + kw[c], peak = 0;
        int32_t *code = gw + (c - c_begin) * per_channel; /* GW, then the unclamped new codes */
        for (int32_t t = 0; t < per_channel; t++) {
            int32_t i = c * per_channel + t;
            int64_t step = scaled(code[t], u->mult[c], n);
            if (u->mu_q15 && mom) {
                mom[i] = (int16_t)momentum(mom[i], step, u->mu_q15, WEIGHT_MOM_LIMIT);
                step = (int64_t)mom[i] * (1 << (FRACTION_BITS - MOMENTUM_SHIFT));
            }
            code[t] = s8_sat64(rounded_step(w[i], step, u->key, (uint32_t)i), -WEIGHT_UNCLAMPED, WEIGHT_UNCLAMPED);
            peak = s8_max(peak, code[t] < 0 ? -code[t] : code[t]);
        }
        int32_t change = peak > 127 ? 1 : (peak < SHRINK_BELOW ? -1 : 0);
        kw[c] += change;
        if (bias) bias[c] = rescaled(bias[c], change, S8_INT32_MAX);
        if (bias_mom) bias_mom[c] = rescaled(bias_mom[c], change, S8_INT32_MAX);
        for (int32_t t = 0; t < per_channel; t++) {
            int32_t i = c * per_channel + t;
            int32_t q = s8_sat(rescaled(code[t], change, 1 << 30), -127, 127);
            if (mom) mom[i] = (int16_t)rescaled(mom[i], change, WEIGHT_MOM_LIMIT);
            changed += q != w[i];
            w[i] = (int8_t)q;
        }
    }
    return changed;
}
