/* loss_s8.c - softmax cross-entropy on int8 logits, in integers (docs/int8.md, "Loss").
 *
 * The logits are at the scale s_z0 2^k_z, k_z moving between steps, so exp(-s_z d) for a
 * code difference d from the row's maximum is computed: t = d s_z log2(e) in Q8 by one
 * mul_shift of host integers (M_e, n_e = 23 - sh_e - k_z), then 2^-t =
 * POW2[t mod 256] / 2^(t >> 8) with POW2 the fixed Q15 table of 2^(-j/256). Probabilities
 * are one unsigned division each (UDIV on the Cortex-M3/M4), the loss an integer log2 by
 * repeated squaring of a Q30 mantissa. The gradient's exponent comes from this step's
 * largest magnitude, so its int32 values wait in the workspace for the second pass. */
#include "poet_kernels_s8.h"
#include "s8_arith.h"

#define Q15 32768
#define LN2_Q16 45426 /* round(ln 2 * 2^16) */
#define EXP_FRACTION_BITS 8
#define EXP_ZERO_BITS 15

/* POW2[j] = floor(2^15 * 2^(-j/256) + 0.5), j = 0..255 (poet_compiler/quant/loss.py's POW2). */
static const uint16_t POW2[256] = {
    32768, 32679, 32591, 32503, 32415, 32327, 32240, 32153, 32066, 31979, 31893, 31806,
    31720, 31635, 31549, 31464, 31379, 31294, 31209, 31125, 31041, 30957, 30873, 30790,
    30706, 30623, 30541, 30458, 30376, 30293, 30212, 30130, 30048, 29967, 29886, 29805,
    29725, 29644, 29564, 29484, 29405, 29325, 29246, 29167, 29088, 29009, 28931, 28852,
    28774, 28697, 28619, 28542, 28464, 28388, 28311, 28234, 28158, 28082, 28006, 27930,
    27855, 27779, 27704, 27629, 27554, 27480, 27406, 27332, 27258, 27184, 27110, 27037,
    26964, 26891, 26818, 26746, 26674, 26601, 26530, 26458, 26386, 26315, 26244, 26173,
    26102, 26031, 25961, 25891, 25821, 25751, 25681, 25612, 25543, 25474, 25405, 25336,
    25268, 25199, 25131, 25063, 24995, 24928, 24860, 24793, 24726, 24659, 24593, 24526,
    24460, 24394, 24328, 24262, 24196, 24131, 24066, 24001, 23936, 23871, 23806, 23742,
    23678, 23614, 23550, 23486, 23423, 23359, 23296, 23233, 23170, 23108, 23045, 22983,
    22921, 22859, 22797, 22735, 22674, 22613, 22552, 22491, 22430, 22369, 22309, 22248,
    22188, 22128, 22068, 22009, 21949, 21890, 21831, 21772, 21713, 21654, 21595, 21537,
    21479, 21421, 21363, 21305, 21247, 21190, 21133, 21076, 21019, 20962, 20905, 20849,
    20792, 20736, 20680, 20624, 20568, 20513, 20457, 20402, 20347, 20292, 20237, 20182,
    20127, 20073, 20019, 19965, 19911, 19857, 19803, 19750, 19696, 19643, 19590, 19537,
    19484, 19431, 19379, 19326, 19274, 19222, 19170, 19118, 19066, 19015, 18963, 18912,
    18861, 18810, 18759, 18708, 18658, 18607, 18557, 18507, 18457, 18407, 18357, 18308,
    18258, 18209, 18160, 18110, 18061, 18013, 17964, 17915, 17867, 17819, 17770, 17722,
    17674, 17627, 17579, 17531, 17484, 17437, 17390, 17343, 17296, 17249, 17202, 17156,
    17109, 17063, 17017, 16971, 16925, 16879, 16834, 16788, 16743, 16697, 16652, 16607,
    16562, 16518, 16473, 16428,
};

/* round(2^15 exp(-s_z d)) for a code difference d in [0, 255]. */
static uint32_t exp_q15(int32_t d, int32_t m_e, int32_t n_e)
{
    int64_t t;
    if (n_e < 1)
        t = d == 0 ? 0 : S8_INT32_MAX;
    else
        t = s8_mul_shift(d, m_e, n_e); /* 0 for n_e > 62 */
    if (t > S8_INT32_MAX)
        t = S8_INT32_MAX;
    int32_t whole = (int32_t)(t >> EXP_FRACTION_BITS), frac = (int32_t)(t & ((1 << EXP_FRACTION_BITS) - 1));
    return whole > EXP_ZERO_BITS ? 0u : (uint32_t)s8_dpot(POW2[frac], whole);
}

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

int32_t poet_s8_softmax_ce(int32_t batch, int32_t classes, const int8_t *logits, const int32_t *labels, int32_t m_e,
                           int32_t n_e, int8_t *g, int32_t *e_out, void *ws)
{
    int32_t *grad = (int32_t *)ws;
    int64_t total = 0;
    uint32_t top = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int8_t *z = logits + b * classes;
        int32_t *gr = grad + b * classes, m = -128, t = labels[b];
        for (int32_t j = 0; j < classes; j++) m = s8_max(m, z[j]);
        uint32_t sum = 0, e_t = 0;
        for (int32_t j = 0; j < classes; j++) {
            uint32_t e = exp_q15(m - z[j], m_e, n_e);
            gr[j] = (int32_t)e; /* held here until S is known */
            sum += e;
        }
        for (int32_t j = 0; j < classes; j++) {
            uint32_t e = (uint32_t)gr[j];
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
