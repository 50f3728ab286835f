/* activation.c - ReLU and hardtanh (ReLU6), forward and backward.
 *
 * ReLU and its backward (threshold 0) work on the bits: a float is <= 0 exactly when
 * its bits, read as a signed integer, are <= 0 (-0.0 is INT_MIN), so
 *   relu:   y = x & ~(x >> 31)                      (sign set -> +0.0)
 *   bwd:    dx = dy & ~(qsub(x, 1) >> 31)           (x <= 0 -> +0.0; QSUB saturates
 *                                                     INT_MIN - 1, so -0.0 stays <= 0)
 * one ALU instruction per element forward and two backward, the loads and stores 4
 * words at a time (LDM/STM). On a Cortex-M4 these run as inline assembly (GCC folds
 * neither the shift into BIC nor the loads into LDM); the C loops below are the same
 * operations for every other target. A NaN counts by its sign bit: +NaN passes, -NaN
 * gives +0.0 (PyTorch keeps the NaN); every other value is PyTorch's result. */
#include "poet_kernels.h"

#if defined(__GNUC__) && defined(__ARM_ARCH_7EM__) && defined(__thumb2__)
#define POET_ASM_M4 1
#endif

#if defined(__GNUC__)
typedef uint32_t __attribute__((may_alias)) bits32;
typedef int32_t __attribute__((may_alias)) sbits32;
#define POET_BITS 1
#endif

void poet_relu_fwd(int32_t count, const float *x, float *y)
{
#if POET_BITS
    const bits32 *xi = (const bits32 *)x;
    bits32 *yi = (bits32 *)y;
    int32_t k = 0;
#if POET_ASM_M4
    /* 16 elements per iteration: LDM 4, 4 x BIC, STM 4, four times; then SUBS, BNE. */
    int32_t blocks = count / 16;
    if (blocks > 0) {
        __asm__ volatile(
            "1:\n\t"
            "ldmia %[x]!, {r4, r5, r6, r7}\n\t"
            "bic r4, r4, r4, asr #31\n\tbic r5, r5, r5, asr #31\n\t"
            "bic r6, r6, r6, asr #31\n\tbic r7, r7, r7, asr #31\n\t"
            "stmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[x]!, {r4, r5, r6, r7}\n\t"
            "bic r4, r4, r4, asr #31\n\tbic r5, r5, r5, asr #31\n\t"
            "bic r6, r6, r6, asr #31\n\tbic r7, r7, r7, asr #31\n\t"
            "stmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[x]!, {r4, r5, r6, r7}\n\t"
            "bic r4, r4, r4, asr #31\n\tbic r5, r5, r5, asr #31\n\t"
            "bic r6, r6, r6, asr #31\n\tbic r7, r7, r7, asr #31\n\t"
            "stmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[x]!, {r4, r5, r6, r7}\n\t"
            "bic r4, r4, r4, asr #31\n\tbic r5, r5, r5, asr #31\n\t"
            "bic r6, r6, r6, asr #31\n\tbic r7, r7, r7, asr #31\n\t"
            "stmia %[y]!, {r4, r5, r6, r7}\n\t"
            "subs %[n], %[n], #1\n\t"
            "bne 1b"
            : [x] "+r"(xi), [y] "+r"(yi), [n] "+r"(blocks)
            :
            : "r4", "r5", "r6", "r7", "cc", "memory");
        k = count / 16 * 16;
    }
#endif
    for (; k < count; k++, xi++, yi++) {
        const uint32_t v = *xi;
        *yi = v & ~(uint32_t)((int32_t)v >> 31);
    }
#else
    for (int32_t k = 0; k < count; k++) y[k] = x[k] > 0.0f ? x[k] : 0.0f;
#endif
}

void poet_threshold_bwd(int32_t count, const float *dy, const float *x, float threshold, float *dx)
{
#if POET_BITS
    if (threshold == 0.0f) {
        const sbits32 *xi = (const sbits32 *)x;
        const bits32 *di = (const bits32 *)dy;
        bits32 *oi = (bits32 *)dx;
        int32_t k = 0;
#if POET_ASM_M4
        /* 16 elements per iteration: per 4, LDM x, 4 x QSUB, LDM dy, 4 x BIC, STM. */
        int32_t blocks = count / 16;
        if (blocks > 0) {
            const int32_t one = 1;
#define POET_THR4                                                              \
            "ldmia %[x]!, {r4, r5, r6, r7}\n\t"                               \
            "qsub r4, r4, %[one]\n\tqsub r5, r5, %[one]\n\t"                  \
            "qsub r6, r6, %[one]\n\tqsub r7, r7, %[one]\n\t"                  \
            "ldmia %[d]!, {r8, r9, r10, r12}\n\t"                             \
            "bic r8, r8, r4, asr #31\n\tbic r9, r9, r5, asr #31\n\t"          \
            "bic r10, r10, r6, asr #31\n\tbic r12, r12, r7, asr #31\n\t"      \
            "stmia %[o]!, {r8, r9, r10, r12}\n\t"
            __asm__ volatile(
                "1:\n\t" POET_THR4 POET_THR4 POET_THR4 POET_THR4
                "subs %[n], %[n], #1\n\t"
                "bne 1b"
                : [x] "+r"(xi), [d] "+r"(di), [o] "+r"(oi), [n] "+r"(blocks)
                : [one] "r"(one)
                : "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r12", "cc", "memory");
#undef POET_THR4
            k = count / 16 * 16;
        }
#endif
        for (; k < count; k++, xi++, di++, oi++) *oi = *xi <= 0 ? 0u : *di;
        return;
    }
#endif
    for (int32_t k = 0; k < count; k++) dx[k] = x[k] <= threshold ? 0.0f : dy[k];
}

void poet_hardtanh_fwd(int32_t count, const float *x, float lo, float hi, float *y)
{
    for (int32_t k = 0; k < count; k++) {
        float v = x[k];
        y[k] = v < lo ? lo : (v > hi ? hi : v);
    }
}

void poet_hardtanh_bwd(int32_t count, const float *dy, const float *x, float lo, float hi, float *dx)
{
    for (int32_t k = 0; k < count; k++) dx[k] = (x[k] <= lo || x[k] >= hi) ? 0.0f : dy[k];
}
