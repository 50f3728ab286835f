/* s8_arith.h - the integer primitives of docs/int8.md ("Primitives"), for the int8 kernels.
 *
 * Every function is exact on the integers the spec names and has no undefined
 * behaviour: sums wrap in uint32_t, products that may exceed 32 bits are taken in 64,
 * shifts are bounded. Right shifts of negative values are arithmetic (GCC's and clang's
 * documented implementation-defined behaviour, which CMSIS-NN relies on as well).
 *
 * Two paths give the same bits: with __ARM_FEATURE_DSP (Cortex-M4/M7) the pair
 * operations are the DSP instructions (SMLAD, SXTB16, SXTAB16) through ACLE; elsewhere
 * (Cortex-M3, the host) they are plain C on the same packed words. */
#ifndef S8_ARITH_H
#define S8_ARITH_H

#include <stdint.h>
#include <string.h>

/* No floating-point register either: on a hard-float build GCC would otherwise move
 * 64-bit values through VFP registers (VLDR/VSTR), which needs the FPU on and its
 * context saved. tests/runtime/test_kernels_s8.py disassembles the kernels to check. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__arm__)
#pragma GCC target("general-regs-only")
#endif

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define S8_DSP 1
#else
#define S8_DSP 0
#endif

#if defined(__GNUC__)
#define S8_INLINE static inline __attribute__((always_inline))
#define S8_NOINLINE __attribute__((noinline))
#else
#define S8_INLINE static inline
#define S8_NOINLINE
#endif

#define S8_INT32_MAX 2147483647
#define S8_INT32_MIN (-2147483647 - 1)

S8_INLINE int32_t s8_min(int32_t a, int32_t b) { return a < b ? a : b; }
S8_INLINE int32_t s8_max(int32_t a, int32_t b) { return a > b ? a : b; }
S8_INLINE int32_t s8_sat(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }
S8_INLINE int32_t s8_sat64(int64_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : (int32_t)v);
}

/* Bit length of a (0 for 0): 32 - clz(a). */
S8_INLINE int32_t s8_nbits(uint32_t a) { return a ? 32 - __builtin_clz(a) : 0; }

/* a / 2^e rounded half away from zero (arm_nn_divide_by_power_of_two), any e >= 0. */
S8_INLINE int32_t s8_dpot(int32_t a, int32_t e)
{
    if (e > 31) /* |a| / 2^e <= 1/2, reached only by INT32_MIN at e = 32, which rounds away to -1 */
        return (e == 32 && a == S8_INT32_MIN) ? -1 : 0;
    uint32_t mask = (e == 0) ? 0u : (0xFFFFFFFFu >> (32 - e));
    uint32_t rem = (uint32_t)a & mask;
    uint32_t threshold = (mask >> 1) + (a < 0);
    return (a >> e) + (rem > threshold);
}

/* The same for a 64-bit a (the momentum of an int32 bias), e in [0, 62]. */
S8_INLINE int64_t s8_dpot64(int64_t a, int32_t e)
{
    uint64_t mask = (e == 0) ? 0u : (~(uint64_t)0 >> (64 - e));
    uint64_t rem = (uint64_t)a & mask;
    uint64_t threshold = (mask >> 1) + (a < 0);
    return (a >> e) + (rem > threshold);
}

/* arm_nn_requantize (default, double rounding): acc * mult * 2^shift. mult in [0, 2^31). */
S8_INLINE int32_t s8_requantize(int32_t acc, int32_t mult, int32_t shift)
{
    int32_t left = shift > 0 ? shift : 0;
    int32_t right = shift < 0 ? (shift < -63 ? 63 : -shift) : 0;
    int32_t shifted = left > 31 ? 0 : (int32_t)((uint32_t)acc << left);
    int32_t high = (int32_t)(((int64_t)shifted * mult + (1 << 30)) >> 31);
    return s8_dpot(high, right);
}

/* A channel's requantization prepared once, evaluated per output (conv epilogues).
 * For a right shift e in [1, 31] (every layer whose scale ratio is below 1/2) the two
 * roundings fold into one 64-bit sum:
 *   dpot(floor(P / 2^31), e) = floor((P + (2^(e-1) - [P < 0]) 2^31) / 2^(31+e)),  P = a M + 2^30
 * (floor of a floor; half up for P >= 0, half down for P < 0), and P < 0 exactly when
 * a < 0 except at P = 0, where both sides are 0. So v = high word of
 *   a M + 2^30 + 2^(30+e) - [a < 0] 2^31
 * shifted right by e - 1: one SMLAL, a subtract with borrow and a shift. */
typedef struct s8_rq {
    int32_t mult, shift;
    int32_t e;   /* the right shift for the fast forms, in [1, 31]; 0: the definition */
    int32_t rnd; /* 2^(e-1) */
    uint32_t k_lo;
    int32_t k_hi;
} s8_rq;

S8_INLINE s8_rq s8_rq_prepare(int32_t mult, int32_t shift)
{
    s8_rq r = {mult, shift, 0, 0, 0, 0};
    if (shift <= -1 && shift >= -31) {
        uint64_t k = ((uint64_t)1 << 30) + ((uint64_t)1 << (30 - shift));
        r.e = -shift;
        r.rnd = 1 << (r.e - 1);
        r.k_lo = (uint32_t)k;
        r.k_hi = (int32_t)(k >> 32);
    }
    return r;
}

S8_INLINE int32_t s8_rq_apply(const s8_rq *r, int32_t a)
{
    if (r->e == 0)
        return s8_requantize(a, r->mult, r->shift);
    int64_t k = (int64_t)(((uint64_t)(uint32_t)r->k_hi << 32) | r->k_lo);
    int64_t d = (int64_t)a * r->mult + k - (int64_t)((uint32_t)a & 0x80000000u);
    return (int32_t)(d >> 32) >> (r->e - 1);
}

/* requantize(a, mult, shift) by the fastest exact form: for a right shift e in [1, 31], on the M4 the doubling high multiply is
 * SMMULR of 2a ((2a M + 2^31) >> 32 = (a M + 2^30) >> 31) when 2a fits (|a| < 2^30, the
 * check is ADDS + BVS), and dpot(h, e) = (h + 2^(e-1) - [h < 0]) >> e, exact in 32 bits
 * because |h| < 2^30 there; elsewhere the 64-bit form of s8_rq_apply. */
S8_INLINE int32_t s8_rq_right(const s8_rq *r, int32_t a)
{
#if S8_DSP && defined(__GNUC__)
    int32_t a2, h;
    if (r->e != 0 && !__builtin_add_overflow(a, a, &a2)) {
        __asm__("smmulr %0, %1, %2" : "=r"(h) : "r"(a2), "r"(r->mult));
        return (h + r->rnd - (int32_t)((uint32_t)h >> 31)) >> r->e;
    }
#endif
    return s8_rq_apply(r, a);
}

/* (x * mult + 2^(n-1)) >> n in 64 bits (single rounding, half up); n > 62 gives 0 and
 * n < 1 is taken as 1 (the caller saturates). mult in [0, 2^31). */
S8_INLINE int64_t s8_mul_shift(int32_t x, int32_t mult, int32_t n)
{
    if (n > 62)
        return 0;
    if (n < 1)
        n = 1;
    return ((int64_t)x * mult + ((int64_t)1 << (n - 1))) >> n;
}

/* mul_shift prepared for one multiplier and shift: for n in [32, 62] the result is the
 * high word of x M + 2^(n-1) (one SMLAL) shifted right by n - 32, and fits 31 bits. */
typedef struct s8_ms {
    int32_t mult, n, sh; /* sh = n - 32 for the fast form, -1 for the definition */
    uint32_t k_lo;
    int32_t k_hi;
} s8_ms;

S8_INLINE s8_ms s8_ms_prepare(int32_t mult, int32_t n)
{
    s8_ms m = {mult, n, -1, 0, 0};
    if (n >= 32 && n <= 62) {
        uint64_t k = (uint64_t)1 << (n - 1);
        m.sh = n - 32;
        m.k_lo = (uint32_t)k;
        m.k_hi = (int32_t)(k >> 32);
    }
    return m;
}

S8_INLINE int64_t s8_ms_apply(const s8_ms *m, int32_t x)
{
    if (m->sh < 0)
        return s8_mul_shift(x, m->mult, m->n);
    int64_t d = (int64_t)x * m->mult + (int64_t)(((uint64_t)(uint32_t)m->k_hi << 32) | m->k_lo);
    return (int32_t)(d >> 32) >> m->sh;
}

/* min(|v|, 2^31 - 1) of a 64-bit value, as the running amax records it. */
S8_INLINE uint32_t s8_abs_cap(int64_t v)
{
    if (v < 0)
        v = -v;
    return v > S8_INT32_MAX ? (uint32_t)S8_INT32_MAX : (uint32_t)v;
}

S8_INLINE void s8_range_merge(int32_t *vrange, int32_t lo, int32_t hi)
{
    if (lo < vrange[0]) vrange[0] = lo;
    if (hi > vrange[1]) vrange[1] = hi;
}

/* ---- pairs of int16 in a word (low half first), the operand of SMLAD -------------- */

/* acc + x.lo * y.lo + x.hi * y.hi, modulo 2^32. */
S8_INLINE uint32_t s8_smlad(uint32_t x, uint32_t y, uint32_t acc)
{
#if S8_DSP
    return (uint32_t)__smlad((int16x2_t)x, (int16x2_t)y, (int32_t)acc);
#else
    int32_t p = (int32_t)(int16_t)(x & 0xFFFFu) * (int32_t)(int16_t)(y & 0xFFFFu);
    int32_t q = (int32_t)(int16_t)(x >> 16) * (int32_t)(int16_t)(y >> 16);
    return acc + (uint32_t)p + (uint32_t)q;
#endif
}

/* acc + (the low or high half of x) * (the low or high half of y): SMLABB, SMLABT, SMLATB, SMLATT. */
#define S8_LO(x) ((int32_t)(int16_t)((x) & 0xFFFFu))
#define S8_HI(x) ((int32_t)(int16_t)((x) >> 16))
S8_INLINE uint32_t s8_smlabt(uint32_t x, uint32_t y, uint32_t acc)
{
#if S8_DSP
    return (uint32_t)__smlabt((int32_t)x, (int32_t)y, (int32_t)acc);
#else
    return acc + (uint32_t)(S8_LO(x) * S8_HI(y));
#endif
}

S8_INLINE uint32_t s8_smlatb(uint32_t x, uint32_t y, uint32_t acc)
{
#if S8_DSP
    return (uint32_t)__smlatb((int32_t)x, (int32_t)y, (int32_t)acc);
#else
    return acc + (uint32_t)(S8_HI(x) * S8_LO(y));
#endif
}

/* Bytes 0 and 2 of w, sign-extended, plus the halves of off (SXTAB16). */
S8_INLINE uint32_t s8_sxtab16(uint32_t off, uint32_t w)
{
#if S8_DSP
    return (uint32_t)__sxtab16((int16x2_t)off, (int8x4_t)w);
#else
    uint32_t lo = (off + (uint32_t)(int32_t)(int8_t)(w & 0xFFu)) & 0xFFFFu;
    uint32_t hi = ((off >> 16) + (uint32_t)(int32_t)(int8_t)((w >> 16) & 0xFFu)) & 0xFFFFu;
    return lo | (hi << 16);
#endif
}

S8_INLINE uint32_t s8_ror8(uint32_t w) { return (w >> 8) | (w << 24); }

/* (low half of a, low half of b) and (high half of a, high half of b): PKHBT, PKHTB. */
S8_INLINE uint32_t s8_pack_lo(uint32_t a, uint32_t b)
{
#if S8_DSP && defined(__GNUC__)
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return (a & 0xFFFFu) | (b << 16);
#endif
}

S8_INLINE uint32_t s8_pack_hi(uint32_t a, uint32_t b)
{
#if S8_DSP && defined(__GNUC__)
    uint32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(b), "r"(a));
    return r;
#else
    return (a >> 16) | (b & 0xFFFF0000u);
#endif
}

S8_INLINE uint32_t s8_load16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The pair (a, b) of int16 values as a word. */
S8_INLINE uint32_t s8_pair(int32_t a, int32_t b) { return ((uint32_t)a & 0xFFFFu) | ((uint32_t)b << 16); }

S8_INLINE uint32_t s8_load32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

S8_INLINE void s8_store32(void *p, uint32_t v) { memcpy(p, &v, 4); }

#endif
