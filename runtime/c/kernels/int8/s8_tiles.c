/* s8_tiles.c - the multiply-accumulate tiles of the int8 convolutions (s8_gemm.h).
 *
 * s8_tiles: two output channels against two columns of packed int16 pairs, per quad of K
 * three LDM and eight SMLAD (16 multiply-accumulates), the sums starting from each
 * channel's bias. s8_tiles_rows: the same over rows in natural order (the weight
 * gradient), four LDRD and eight SMLAD per quad, the sums carried in memory. On the M4
 * both are naked routines that keep their counters on the stack so that the quad loop
 * has all fourteen registers; elsewhere plain C on the same words. */
#include "s8_gemm.h"

#if S8_DSP && defined(__GNUC__) && defined(__thumb2__)
#define S8_ARG __attribute__((unused))
/* One quad: LDM four words of B (two columns), LDM two words of each A row; 8 SMLAD.
 * Accumulators r0 r1 (A row 0 against columns 0, 1), r7 r11 (row 1); A r2, B r3. */
#define S8_TILE_QUAD                                                                   \
    "ldmia r3!, {r4, r5, r6, r8}\n\t"                                                  \
    "ldmia r2!, {r9, r10}\n\t"                                                         \
    "smlad r0, r9, r4, r0\n\t"                                                         \
    "smlad r0, r10, r5, r0\n\t"                                                        \
    "smlad r1, r9, r6, r1\n\t"                                                         \
    "smlad r1, r10, r8, r1\n\t"                                                        \
    "ldmia r2!, {r9, r10}\n\t"                                                         \
    "smlad r7, r9, r4, r7\n\t"                                                         \
    "smlad r7, r10, r5, r7\n\t"                                                        \
    "smlad r11, r9, r6, r11\n\t"                                                       \
    "smlad r11, r10, r8, r11\n\t"

/* s8_tiles(quads r0, pairs r1, a r2, b r3, init, acc, rs on the stack): per pair of A
 * rows the sums start from init, run quads 4 at a time after the 1-3 left over, and go
 * to acc with two STRD; the counters wait on the stack. */
__attribute__((naked)) void s8_tiles(S8_ARG int32_t quads, S8_ARG int32_t pairs, S8_ARG const int16_t *a,
                                     S8_ARG const int16_t *b, S8_ARG const uint32_t *init, S8_ARG uint32_t *acc,
                                     S8_ARG int32_t rs)
{
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #24\n\t" /* [sp] quads, +4 pairs, +8 b, +12 init, +16 acc, +20 rs in bytes */
        "str r0, [sp]\n\t"
        "str r1, [sp, #4]\n\t"
        "str r3, [sp, #8]\n\t"
        "ldr r4, [sp, #60]\n\t"
        "str r4, [sp, #12]\n\t"
        "ldr r12, [sp, #64]\n\t"
        "ldr r4, [sp, #68]\n\t"
        "lsl r4, r4, #2\n\t"
        "str r4, [sp, #20]\n\t"
        "cmp r1, #0\n\t"
        "ble 9f\n"
        "5:\n\t"
        "ldr r4, [sp, #12]\n\t"
        "ldrd r0, r7, [r4], #8\n\t"
        "str r4, [sp, #12]\n\t"
        "mov r1, r0\n\t"
        "mov r11, r7\n\t"
        "ldr r3, [sp, #8]\n\t"
        "ldr lr, [sp]\n\t"
        "tst lr, #1\n\t"
        "beq 6f\n\t" S8_TILE_QUAD
        "6:\n\t"
        "tst lr, #2\n\t"
        "beq 7f\n\t" S8_TILE_QUAD S8_TILE_QUAD
        "7:\n\t"
        "lsrs lr, lr, #2\n\t"
        "beq 8f\n"
        "1:\n\t" S8_TILE_QUAD S8_TILE_QUAD S8_TILE_QUAD S8_TILE_QUAD
        "subs lr, lr, #1\n\t"
        "bne 1b\n"
        "8:\n\t"
        "ldr r4, [sp, #20]\n\t"
        "strd r0, r1, [r12]\n\t"
        "add r5, r12, r4\n\t"
        "strd r7, r11, [r5]\n\t"
        "add r12, r5, r4\n\t"
        "ldr r4, [sp, #4]\n\t"
        "subs r4, r4, #1\n\t"
        "str r4, [sp, #4]\n\t"
        "bne 5b\n"
        "9:\n\t"
        "add sp, sp, #24\n\t"
        "pop {r4-r11, pc}\n\t");
}

/* s8_tiles_rows(quads r0, pairs r1, a r2, b0 r3, b1, acc, rs on the stack) in full: the
 * loop over pairs keeps its counters on the stack so that the quad loop has the
 * registers (accumulators r0 r1 r7 r11, A r2, B rows r3 r12, count lr). LDRD needs
 * word-aligned B rows; a row at an odd int16 offset takes two LDR instead. */
#define S8_B_ALIGNED "ldrd r4, r5, [r3], #8\n\tldrd r6, r8, [r12], #8\n\t"
#define S8_B_UNALIGNED "ldr r4, [r3], #4\n\tldr r5, [r3], #4\n\tldr r6, [r12], #4\n\tldr r8, [r12], #4\n\t"
#define S8_ROWS_QUAD(LOAD_B)                                                                                     \
    LOAD_B                                                                                                       \
    "ldrd r9, r10, [r2], #8\n\t"                                                                                \
    "smlad r0, r9, r4, r0\n\t"                                                                                  \
    "smlad r0, r10, r5, r0\n\t"                                                                                 \
    "smlad r1, r9, r6, r1\n\t"                                                                                  \
    "smlad r1, r10, r8, r1\n\t"                                                                                 \
    "ldrd r9, r10, [r2, #120]\n\t" /* the second A row, S8_ROW int16 on */                                      \
    "smlad r7, r9, r4, r7\n\t"                                                                                  \
    "smlad r7, r10, r5, r7\n\t"                                                                                 \
    "smlad r11, r9, r6, r11\n\t"                                                                                \
    "smlad r11, r10, r8, r11\n\t"

/* The whole routine, for one way of loading the B rows. */
#define S8_TILES_ROWS_BODY(LOAD_B)                                                                  \
    __asm__ volatile(                                                                               \
        "push {r4-r11, lr}\n\t"                                                                     \
        "sub sp, sp, #24\n\t" /* [sp] quads, +4 pairs, +8 b0, +12 b1, +16 acc, +20 rs in bytes */   \
        "str r0, [sp]\n\t"                                                                          \
        "str r1, [sp, #4]\n\t"                                                                      \
        "str r3, [sp, #8]\n\t"                                                                      \
        "ldr r4, [sp, #60]\n\t"                                                                     \
        "str r4, [sp, #12]\n\t"                                                                     \
        "ldr r4, [sp, #64]\n\t"                                                                     \
        "str r4, [sp, #16]\n\t"                                                                     \
        "ldr r4, [sp, #68]\n\t"                                                                     \
        "lsl r4, r4, #2\n\t"                                                                        \
        "str r4, [sp, #20]\n\t"                                                                     \
        "cmp r1, #0\n\t"                                                                            \
        "ble 9f\n"                                                                                  \
        "5:\n\t"                                                                                    \
        "ldr r4, [sp, #16]\n\t"                                                                     \
        "ldr r5, [sp, #20]\n\t"                                                                     \
        "ldrd r0, r1, [r4]\n\t"                                                                     \
        "add r4, r4, r5\n\t"                                                                        \
        "ldrd r7, r11, [r4]\n\t"                                                                    \
        "ldr r3, [sp, #8]\n\t"                                                                      \
        "ldr r12, [sp, #12]\n\t"                                                                    \
        "ldr lr, [sp]\n\t"                                                                          \
        "push {r2}\n\t"                                                                             \
        "lsrs lr, lr, #1\n\t"                                                                       \
        "bcc 6f\n\t" S8_ROWS_QUAD(LOAD_B)                                                           \
        "6:\n\t"                                                                                    \
        "cmp lr, #0\n\t"                                                                            \
        "beq 8f\n"                                                                                  \
        "7:\n\t" S8_ROWS_QUAD(LOAD_B) S8_ROWS_QUAD(LOAD_B)                                          \
        "subs lr, lr, #1\n\t"                                                                       \
        "bne 7b\n"                                                                                  \
        "8:\n\t"                                                                                    \
        "pop {r2}\n\t"                                                                              \
        "add r2, r2, #256\n\t" /* the next pair of A rows */                                        \
        "ldr r4, [sp, #16]\n\t"                                                                     \
        "ldr r5, [sp, #20]\n\t"                                                                     \
        "strd r0, r1, [r4]\n\t"                                                                     \
        "add r4, r4, r5\n\t"                                                                        \
        "strd r7, r11, [r4]\n\t"                                                                    \
        "add r4, r4, r5\n\t"                                                                        \
        "str r4, [sp, #16]\n\t"                                                                     \
        "ldr r0, [sp, #4]\n\t"                                                                      \
        "subs r0, r0, #1\n\t"                                                                       \
        "str r0, [sp, #4]\n\t"                                                                      \
        "bne 5b\n"                                                                                  \
        "9:\n\t"                                                                                    \
        "add sp, sp, #24\n\t"                                                                       \
        "pop {r4-r11, pc}\n\t");

__attribute__((naked)) static void tiles_rows_aligned(S8_ARG int32_t quads, S8_ARG int32_t pairs,
                                                      S8_ARG const int16_t *a, S8_ARG const int16_t *b0,
                                                      S8_ARG const int16_t *b1, S8_ARG uint32_t *acc, S8_ARG int32_t rs)
{
    S8_TILES_ROWS_BODY(S8_B_ALIGNED)
}

__attribute__((naked)) static void tiles_rows_unaligned(S8_ARG int32_t quads, S8_ARG int32_t pairs,
                                                        S8_ARG const int16_t *a, S8_ARG const int16_t *b0,
                                                        S8_ARG const int16_t *b1, S8_ARG uint32_t *acc, S8_ARG int32_t rs)
{
    S8_TILES_ROWS_BODY(S8_B_UNALIGNED)
}

void s8_tiles_rows(int32_t quads, int32_t pairs, const int16_t *a, const int16_t *b0, const int16_t *b1, uint32_t *acc,
                   int32_t rs)
{
    if ((((uintptr_t)b0 | (uintptr_t)b1) & 3u) == 0)
        tiles_rows_aligned(quads, pairs, a, b0, b1, acc, rs);
    else
        tiles_rows_unaligned(quads, pairs, a, b0, b1, acc, rs);
}
#else
void s8_tiles_rows(int32_t quads, int32_t pairs, const int16_t *a, const int16_t *b0, const int16_t *b1, uint32_t *acc,
                   int32_t rs)
{
    for (; pairs > 0; pairs--, acc += 2 * rs, a += 2 * S8_ROW) {
        uint32_t s00 = acc[0], s01 = acc[1], s10 = acc[rs], s11 = acc[rs + 1];
        for (int32_t q = 0; q < 4 * quads; q += 2) {
            uint32_t x0 = s8_load32(b0 + q), x1 = s8_load32(b1 + q);
            uint32_t a0 = s8_load32(a + q), a1 = s8_load32(a + S8_ROW + q);
            s00 = s8_smlad(a0, x0, s00), s01 = s8_smlad(a0, x1, s01);
            s10 = s8_smlad(a1, x0, s10), s11 = s8_smlad(a1, x1, s11);
        }
        acc[0] = s00, acc[1] = s01, acc[rs] = s10, acc[rs + 1] = s11;
    }
}

void s8_tiles(int32_t quads, int32_t pairs, const int16_t *a, const int16_t *b, const uint32_t *init, uint32_t *acc,
              int32_t rs)
{
    for (; pairs > 0; pairs--, acc += 2 * rs, init += 2) {
        uint32_t s00 = init[0], s01 = init[0], s10 = init[1], s11 = init[1];
        const int16_t *bp = b;
        for (int32_t q = 0; q < quads; q++, a += 8, bp += 8) {
            uint32_t b0 = s8_load32(bp), b1 = s8_load32(bp + 2), b2 = s8_load32(bp + 4), b3 = s8_load32(bp + 6);
            uint32_t a0 = s8_load32(a), a1 = s8_load32(a + 2), a2 = s8_load32(a + 4), a3 = s8_load32(a + 6);
            s00 = s8_smlad(a1, b1, s8_smlad(a0, b0, s00));
            s01 = s8_smlad(a1, b3, s8_smlad(a0, b2, s01));
            s10 = s8_smlad(a3, b1, s8_smlad(a2, b0, s10));
            s11 = s8_smlad(a3, b3, s8_smlad(a2, b2, s11));
        }
        acc[0] = s00, acc[1] = s01, acc[rs] = s10, acc[rs + 1] = s11;
    }
}
#endif

