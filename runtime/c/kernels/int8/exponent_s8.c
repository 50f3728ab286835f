/* exponent_s8.c - the delayed power-of-two exponents, moved between steps from the ranges
 * the kernels recorded (docs/int8.md, "Delayed scaling"). */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define GRAD_TARGET_BITS 7

int32_t poet_s8_next_act_exponent(int32_t k, const int32_t vrange[2], int32_t z, int32_t clamped_below)
{
    int32_t vmin = vrange[0], vmax = vrange[1];
    if (vmax > 127 - z || (!clamped_below && vmin < -128 - z))
        return k + 1;
    if (vmax <= (127 - z) / 2 && (clamped_below || vmin >= -((z + 128) / 2)))
        return k - 1;
    return k;
}

int32_t poet_s8_next_grad_exponent(int32_t e, uint32_t amax)
{
    return amax ? e + GRAD_TARGET_BITS - s8_nbits(amax) : e;
}

void poet_s8_rescale_bias(int32_t count, int32_t *bias, int32_t d)
{
    for (int32_t t = 0; t < count; t++) {
        if (d > 0)
            bias[t] = s8_dpot(bias[t], d);
        else if (d < 0)
            bias[t] = s8_sat64(d < -32 ? (bias[t] ? (bias[t] > 0 ? INT64_MAX : INT64_MIN) : 0)
                                       : (int64_t)bias[t] * ((int64_t)1 << -d),
                               -S8_INT32_MAX, S8_INT32_MAX);
    }
}
