/* s8_epilogue.c - the per-output epilogues of the int8 convolutions (s8_gemm.h).
 *
 * Forward: v = requantize(acc), the running range of v, y = sat(v + z_y, act_min,
 * act_max). Input gradient: v = mul_shift(acc), amax, g_x = sat(v, +-127). A run of
 * outputs shares one channel's constants; on the M4 the common forms (a right shift of
 * 1-31 bits and the full int8 range; mul_shift's n in [32, 62]) are assembly loops of 19
 * instructions per output, everything else the definitions in C. */
#include "s8_gemm.h"

/* One row on the M4: per output ADDS (2 acc, the overflow check), SMMULR, ADD, SUB, ASR;
 * the range (CMP/IT/MOV twice); ADD z, SSAT 8; STRB: 19 with the loop. An accumulator of
 * 2^30 or more leaves through label 3 for the 64-bit form and comes back. */
#if S8_DSP && defined(__GNUC__) && defined(__thumb2__)
#define S8_FAST_FWD 1
S8_INLINE void fwd_row_asm(const uint32_t *acc, int32_t n, int8_t *y, int32_t step, const s8_rq *q, int32_t z,
                           int32_t *vmin_io, int32_t *vmax_io)
{
    int32_t vmin = *vmin_io, vmax = *vmax_io, m = q->mult, rnd = q->rnd, e = q->e;
    __asm__ volatile(
        "1:\n\t"
        "ldr r4, [%[acc]], #4\n\t"
        "adds r5, r4, r4\n\t"
        "bvs 3f\n\t"
        "smmulr r5, r5, %[m]\n\t"
        "add r6, r5, %[rnd]\n\t"
        "sub r6, r6, r5, lsr #31\n\t"
        "asr r6, r6, %[e]\n"
        "2:\n\t"
        "cmp r6, %[vmin]\n\t"
        "it lt\n\t"
        "movlt %[vmin], r6\n\t"
        "cmp r6, %[vmax]\n\t"
        "it gt\n\t"
        "movgt %[vmax], r6\n\t"
        "add r6, r6, %[z]\n\t"
        "ssat r6, #8, r6\n\t"
        "strb r6, [%[y]]\n\t"
        "add %[y], %[y], %[step]\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b\n\t"
        "b 4f\n"
        "3:\n\t" /* hi:lo = acc M + k - [acc < 0] 2^31; v = hi >> (e - 1) */
        "ldr r5, [%[q], #16]\n\t"
        "ldr r6, [%[q], #20]\n\t"
        "smlal r5, r6, r4, %[m]\n\t"
        "and r4, r4, #0x80000000\n\t"
        "subs r5, r5, r4\n\t"
        "sbc r6, r6, #0\n\t"
        "sub r5, %[e], #1\n\t"
        "asr r6, r6, r5\n\t"
        "b 2b\n"
        "4:\n\t"
        : [acc] "+r"(acc), [y] "+r"(y), [n] "+r"(n), [vmin] "+r"(vmin), [vmax] "+r"(vmax)
        : [m] "r"(m), [rnd] "r"(rnd), [e] "r"(e), [z] "r"(z), [step] "r"(step), [q] "r"(q)
        : "r4", "r5", "r6", "cc", "memory");
    *vmin_io = vmin, *vmax_io = vmax;
}
#else
#define S8_FAST_FWD 0
#endif

/* One row in C: any requantization, any clamp. */
static void fwd_row(const uint32_t *restrict acc, int32_t n, int8_t *restrict y, int32_t step, const s8_rq *rq,
                    s8_fwd_state *st)
{
    for (int32_t j = 0; j < n; j++) y[j * step] = s8_fwd_one(st, rq, acc[j]);
}

/* One row of the input gradient for n in [32, 62] on the M4: per output SMLAL onto
 * 2^(n-1), ASR; |v| (EOR, SUB), amax (CMP/IT/MOV); SSAT 8 and -128 -> -127
 * (CMN/IT/MVN); STRB: 19 with the loop. */
#if S8_DSP && defined(__GNUC__) && defined(__thumb2__)
#define S8_FAST_GRAD 1
S8_INLINE void grad_row_asm(const uint32_t *acc, int32_t n, int8_t *y, int32_t step, const s8_ms *ms,
                            uint32_t *amax_io)
{
    uint32_t amax = *amax_io, klo = ms->k_lo;
    int32_t khi = ms->k_hi, m = ms->mult, sh = ms->sh;
    __asm__ volatile(
        "1:\n\t"
        "ldr r4, [%[acc]], #4\n\t"
        "mov r5, %[klo]\n\t"
        "mov r6, %[khi]\n\t"
        "smlal r5, r6, r4, %[m]\n\t"
        "asr r6, r6, %[sh]\n\t"
        "eor r5, r6, r6, asr #31\n\t"
        "sub r5, r5, r6, asr #31\n\t"
        "cmp r5, %[amax]\n\t"
        "it hi\n\t"
        "movhi %[amax], r5\n\t"
        "ssat r6, #8, r6\n\t"
        "cmn r6, #128\n\t"
        "it eq\n\t"
        "mvneq r6, #126\n\t"
        "strb r6, [%[y]]\n\t"
        "add %[y], %[y], %[step]\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b\n\t"
        : [acc] "+r"(acc), [y] "+r"(y), [n] "+r"(n), [amax] "+r"(amax)
        : [m] "r"(m), [sh] "r"(sh), [klo] "r"(klo), [khi] "r"(khi), [step] "r"(step)
        : "r4", "r5", "r6", "cc", "memory");
    *amax_io = amax;
}
#else
#define S8_FAST_GRAD 0
#endif

static void grad_row(const uint32_t *restrict acc, int32_t n, int8_t *restrict y, int32_t step, const s8_ms *ms,
                     uint32_t *amax)
{
    for (int32_t j = 0; j < n; j++) y[j * step] = s8_grad_one(ms, amax, acc[j]);
}

void s8_epi_fwd(const uint32_t *acc, int32_t rows, int32_t acc_step, int32_t n, int8_t *y, int32_t y_row,
                int32_t step, const s8_rq *rq, int32_t rq_step, s8_fwd_state *st)
{
    int32_t fast = S8_FAST_FWD && st->lo == -128 && st->hi == 127 && n > 0;
    for (int32_t r = 0; r < rows; r++, rq += rq_step, acc += acc_step, y += y_row) {
#if S8_FAST_FWD
        if (fast && rq->e != 0) {
            fwd_row_asm(acc, n, y, step, rq, st->z_y, &st->vmin, &st->vmax);
            continue;
        }
#endif
        (void)fast;
        fwd_row(acc, n, y, step, rq, st);
    }
}

void s8_epi_grad(const uint32_t *acc, int32_t rows, int32_t acc_step, int32_t n, int8_t *y, int32_t y_row,
                 int32_t step, const s8_ms *ms, uint32_t *amax)
{
    for (int32_t r = 0; r < rows; r++, acc += acc_step, y += y_row) {
#if S8_FAST_GRAD
        if (ms->sh >= 0 && n > 0) {
            grad_row_asm(acc, n, y, step, ms, amax);
            continue;
        }
#endif
        grad_row(acc, n, y, step, ms, amax);
    }
}

