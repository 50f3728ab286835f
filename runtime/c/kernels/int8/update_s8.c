/* update_s8.c - SGD applied in integers: optional momentum, an int8 residual per weight,
 * biases rounded to the nearest, and the weight exponents' channel rule (docs/int8.md,
 * "Update", "Weight exponents").
 *
 * No random numbers and no order dependence: each element's new value is a function of
 * its own operands, so the bits do not depend on the order the schedule runs updates in,
 * nor on the channel ranges a caller splits a layer into. */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define FRACTION_BITS 16            /* u: Q16 parameter LSBs */
#define Q8_BITS 8                   /* momentum buffers, and a weight with its residual: Q8 LSBs */
#define UPDATE_LIMIT (1 << 23)      /* |u| at most 128 LSBs a step */
#define WEIGHT_MOM_LIMIT 32767
#define SHRINK_BELOW 32

/* u = sat(mul_shift(grad, mult, n), +-2^23), Q16. */
S8_INLINE int64_t scaled(int32_t grad, int32_t mult, int32_t n)
{
    int64_t u = s8_mul_shift(grad, mult, n);
    return u < -UPDATE_LIMIT ? -UPDATE_LIMIT : (u > UPDATE_LIMIT ? UPDATE_LIMIT : u);
}

/* torch.optim.SGD's buf = mu buf + g in Q8: the decay rounds toward zero, so a buffer no
 * longer fed reaches 0 instead of resting at a small value that moves its weight forever. */
S8_INLINE int32_t momentum(int64_t buf, int64_t u, int32_t mu_q15, int32_t limit)
{
    int64_t p = buf * mu_q15;
    int64_t decayed = p < 0 ? -((-p) >> 15) : p >> 15;
    return s8_sat64(decayed + s8_dpot64(u, FRACTION_BITS - Q8_BITS), -limit, limit);
}

void poet_s8_update_bias(const poet_s8_update *u, int32_t c_begin, int32_t c_end, const int32_t *kw,
                         const int32_t *gb, int32_t *bias, int32_t *mom)
{
    for (int32_t c = c_begin; c < c_end; c++) {
        int64_t step = scaled(gb[c - c_begin], u->mult[c], 31 - u->shift[c] + u->e_y + u->k_x + kw[c]);
        if (u->mu_q15 && mom) {
            mom[c] = momentum(mom[c], step, u->mu_q15, S8_INT32_MAX);
            step = (int64_t)mom[c] * (1 << (FRACTION_BITS - Q8_BITS));
        }
        int64_t lsbs = (step + (1 << (FRACTION_BITS - 1))) >> FRACTION_BITS; /* nearest, half up */
        bias[c] = s8_sat64((int64_t)bias[c] - lsbs, -S8_INT32_MAX, S8_INT32_MAX);
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

/* The nearest code of a Q8 weight, before saturation: (w + 128) >> 8, half up. */
S8_INLINE int32_t nearest_code(int32_t w) { return (w + (1 << (Q8_BITS - 1))) >> Q8_BITS; }

/* w = 256 q + r - step for one channel's elements, written over its GW; returns the
 * largest |nearest code| (the channel rule's test). */
static int32_t stepped_channel(const poet_s8_update *u, int32_t c, int32_t n, int32_t per_channel, int32_t *wq8,
                               const int8_t *w, const int8_t *residual, int16_t *mom)
{
    int32_t peak = 0;
    for (int32_t t = 0; t < per_channel; t++) {
        int32_t i = c * per_channel + t, step;
        int64_t v = scaled(wq8[t], u->mult[c], n);
        if (u->mu_q15 && mom) {
            mom[i] = (int16_t)momentum(mom[i], v, u->mu_q15, WEIGHT_MOM_LIMIT);
            step = mom[i];
        } else {
            step = (int32_t)s8_dpot64(v, FRACTION_BITS - Q8_BITS);
        }
        wq8[t] = w[i] * (1 << Q8_BITS) + residual[i] - step;
        int32_t q = nearest_code(wq8[t]);
        peak = s8_max(peak, q < 0 ? -q : q);
    }
    return peak;
}

int32_t poet_s8_update_weight(const poet_s8_update *u, int32_t c_begin, int32_t c_end, int32_t per_channel,
                              int32_t *gw, int8_t *w, int8_t *residual, int16_t *mom, int32_t *kw, int32_t *bias,
                              int32_t *bias_mom)
{
    int32_t changed = 0;
    for (int32_t c = c_begin; c < c_end; c++) {
        int32_t n = 31 - u->shift[c] + u->e_y - u->k_x + kw[c];
        int32_t *wq8 = gw + (c - c_begin) * per_channel; /* GW, then the Q8 weights */
        int32_t peak = stepped_channel(u, c, n, per_channel, wq8, w, residual, mom);
        int32_t change = peak > 127 ? 1 : (peak < SHRINK_BELOW ? -1 : 0);
        kw[c] += change;
        if (bias) bias[c] = rescaled(bias[c], change, S8_INT32_MAX);
        if (bias_mom) bias_mom[c] = rescaled(bias_mom[c], change, S8_INT32_MAX);
        for (int32_t t = 0; t < per_channel; t++) {
            int32_t i = c * per_channel + t;
            int32_t v = rescaled(wq8[t], change, S8_INT32_MAX); /* |w| < 2^17: never saturates */
            int32_t q = s8_sat(nearest_code(v), -127, 127);
            if (mom) mom[i] = (int16_t)rescaled(mom[i], change, WEIGHT_MOM_LIMIT);
            changed += q != w[i];
            w[i] = (int8_t)q;
            residual[i] = (int8_t)s8_sat(v - q * (1 << Q8_BITS), -128, 127);
        }
    }
    return changed;
}
