/* loss_s8.c - softmax cross-entropy on int8 logits, in integers (docs/int8.md, "Loss").
 *
 * The logits' scale is static, so exp(-s_z d) for the 256 possible gaps d from a row's
 * maximum is a table of Q15 integers made on the host. Probabilities are one unsigned
 * division each (UDIV on the Cortex-M3/M4), the loss an integer log2 by repeated
 * squaring of a Q30 mantissa. The gradient's exponent comes from this step's largest
 * magnitude, so its int32 values wait in the workspace for the second pass. */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define Q15 32768
#define LN2_Q16 45426 /* round(ln 2 * 2^16) */

int32_t poet_s8_log2q(uint32_t v)
{
    if (v == 0)
        return 0;
    int32_t n = s8_nbits(v) - 1;
    uint32_t m = n <= 30 ? v << (30 - n) : v >> (n - 30);
    int32_t frac = 0;
    for (int32_t i = 0; i < 16; i++) {
        m = (uint32_t)(((uint64_t)m * m) >> 30);
        frac <<= 1;
        if (m >= 0x80000000u) {
            m >>= 1;
            frac |= 1;
        }
    }
    return (n << 16) + frac;
}

int32_t poet_s8_softmax_ce_ws(int32_t batch, int32_t classes) { return (int32_t)(4 * batch * classes); }

int32_t poet_s8_softmax_ce(int32_t batch, int32_t classes, const int8_t *logits, const int32_t *labels,
                           const uint16_t *table, int8_t *g, int32_t *e_out, void *ws)
{
    int32_t *grad = (int32_t *)ws;
    int64_t total = 0;
    uint32_t top = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int8_t *z = logits + b * classes;
        int32_t *gr = grad + b * classes, m = -128, t = labels[b];
        for (int32_t j = 0; j < classes; j++) m = s8_max(m, z[j]);
        uint32_t sum = 0, e_t = 0;
        for (int32_t j = 0; j < classes; j++) sum += table[m - z[j]];
        for (int32_t j = 0; j < classes; j++) {
            uint32_t e = table[m - z[j]];
            int32_t p = (int32_t)((e * Q15 + (sum >> 1)) / sum);
            if (j == t) {
                e_t = e;
                p -= Q15;
            }
            gr[j] = p;
            uint32_t mag = (uint32_t)(p < 0 ? -p : p);
            if (mag > top) top = mag;
        }
        int32_t diff = poet_s8_log2q(sum) - poet_s8_log2q(e_t > 0 ? e_t : 1u);
        total += ((int64_t)diff * LN2_Q16 + (1 << 15)) >> 16;
    }
    int32_t r = s8_max(0, s8_nbits(top) - 7);
    for (int32_t i = 0; i < batch * classes; i++) g[i] = (int8_t)s8_sat(s8_dpot(grad[i], r), -127, 127);
    *e_out = 15 - r;
    return batch > 0 ? (int32_t)((total + batch / 2) / batch) : 0;
}
