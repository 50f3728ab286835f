/* s8_gemm.c - the correlation driver of the int8 convolutions (forward, and the stride-1
 * transposed convolution of the input gradient) on the packed tile of s8_gemm.h.
 *
 * out[n, co, oh, ow] = epilogue(sum_k A[co, k] * col[k]) with the columns in pairs:
 *   - 1x1, stride 1, no padding (pointwise, linear): a column is one position's channels,
 *     read straight from NCHW, pairs over the flattened (n, position) index (a linear
 *     layer pairs two samples); two neighbouring positions pack together: one halfword
 *     per channel holds both, SXTAB16 widens and subtracts z for four channels at once;
 *   - otherwise: the input rows of two output rows are widened once into int16 with
 *     their padding (a "band": x - z, 0 outside), and a column is gathered from the band
 *     through a table of the taps' offsets, so no bound is tested per element; at unit
 *     stride the two columns of a pair are neighbours, one word per tap (PKHBT/PKHTB
 *     deal the words into the quads).
 * Each column pair is packed once and used by every pair of output channels. */
#include "s8_gemm.h"

/* ---- the tile -------------------------------------------------------------------------- */

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

__attribute__((naked)) static void tiles_rows_aligned(S8_ARG int32_t quads, S8_ARG int32_t pairs, S8_ARG const int16_t *a,
                                          S8_ARG const int16_t *b0, S8_ARG const int16_t *b1, S8_ARG uint32_t *acc,
                                          S8_ARG int32_t rs)
{
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #24\n\t" /* [sp] quads, +4 pairs, +8 b0, +12 b1, +16 acc, +20 rs in bytes */
        "str r0, [sp]\n\t"
        "str r1, [sp, #4]\n\t"
        "str r3, [sp, #8]\n\t"
        "ldr r4, [sp, #60]\n\t"
        "str r4, [sp, #12]\n\t"
        "ldr r4, [sp, #64]\n\t"
        "str r4, [sp, #16]\n\t"
        "ldr r4, [sp, #68]\n\t"
        "lsl r4, r4, #2\n\t"
        "str r4, [sp, #20]\n\t"
        "cmp r1, #0\n\t"
        "ble 9f\n"
        "5:\n\t"
        "ldr r4, [sp, #16]\n\t"
        "ldr r5, [sp, #20]\n\t"
        "ldrd r0, r1, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "ldrd r7, r11, [r4]\n\t"
        "ldr r3, [sp, #8]\n\t"
        "ldr r12, [sp, #12]\n\t"
        "ldr lr, [sp]\n\t"
        "push {r2}\n\t"
        "lsrs lr, lr, #1\n\t"
        "bcc 6f\n\t" S8_ROWS_QUAD(S8_B_ALIGNED)
        "6:\n\t"
        "cmp lr, #0\n\t"
        "beq 8f\n"
        "7:\n\t" S8_ROWS_QUAD(S8_B_ALIGNED) S8_ROWS_QUAD(S8_B_ALIGNED)
        "subs lr, lr, #1\n\t"
        "bne 7b\n"
        "8:\n\t"
        "pop {r2}\n\t"
        "add r2, r2, #256\n\t" /* the next pair of A rows */
        "ldr r4, [sp, #16]\n\t"
        "ldr r5, [sp, #20]\n\t"
        "strd r0, r1, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "strd r7, r11, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "str r4, [sp, #16]\n\t"
        "ldr r0, [sp, #4]\n\t"
        "subs r0, r0, #1\n\t"
        "str r0, [sp, #4]\n\t"
        "bne 5b\n"
        "9:\n\t"
        "add sp, sp, #24\n\t"
        "pop {r4-r11, pc}\n\t");
}

__attribute__((naked)) static void tiles_rows_unaligned(S8_ARG int32_t quads, S8_ARG int32_t pairs, S8_ARG const int16_t *a,
                                          S8_ARG const int16_t *b0, S8_ARG const int16_t *b1, S8_ARG uint32_t *acc,
                                          S8_ARG int32_t rs)
{
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #24\n\t" /* [sp] quads, +4 pairs, +8 b0, +12 b1, +16 acc, +20 rs in bytes */
        "str r0, [sp]\n\t"
        "str r1, [sp, #4]\n\t"
        "str r3, [sp, #8]\n\t"
        "ldr r4, [sp, #60]\n\t"
        "str r4, [sp, #12]\n\t"
        "ldr r4, [sp, #64]\n\t"
        "str r4, [sp, #16]\n\t"
        "ldr r4, [sp, #68]\n\t"
        "lsl r4, r4, #2\n\t"
        "str r4, [sp, #20]\n\t"
        "cmp r1, #0\n\t"
        "ble 9f\n"
        "5:\n\t"
        "ldr r4, [sp, #16]\n\t"
        "ldr r5, [sp, #20]\n\t"
        "ldrd r0, r1, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "ldrd r7, r11, [r4]\n\t"
        "ldr r3, [sp, #8]\n\t"
        "ldr r12, [sp, #12]\n\t"
        "ldr lr, [sp]\n\t"
        "push {r2}\n\t"
        "lsrs lr, lr, #1\n\t"
        "bcc 6f\n\t" S8_ROWS_QUAD(S8_B_UNALIGNED)
        "6:\n\t"
        "cmp lr, #0\n\t"
        "beq 8f\n"
        "7:\n\t" S8_ROWS_QUAD(S8_B_UNALIGNED) S8_ROWS_QUAD(S8_B_UNALIGNED)
        "subs lr, lr, #1\n\t"
        "bne 7b\n"
        "8:\n\t"
        "pop {r2}\n\t"
        "add r2, r2, #256\n\t" /* the next pair of A rows */
        "ldr r4, [sp, #16]\n\t"
        "ldr r5, [sp, #20]\n\t"
        "strd r0, r1, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "strd r7, r11, [r4]\n\t"
        "add r4, r4, r5\n\t"
        "str r4, [sp, #16]\n\t"
        "ldr r0, [sp, #4]\n\t"
        "subs r0, r0, #1\n\t"
        "str r0, [sp, #4]\n\t"
        "bne 5b\n"
        "9:\n\t"
        "add sp, sp, #24\n\t"
        "pop {r4-r11, pc}\n\t");
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

/* ---- packing ---------------------------------------------------------------------------- */

void s8_pack_rows(int32_t rows, int32_t k, const int8_t *src, int32_t row_step, int16_t *dst)
{
    int32_t k4 = s8_round4(k), rows2 = s8_round2(rows);
    for (int32_t r = 0; r < rows2; r++) {
        int16_t *d = dst + (r >> 1) * 2 * k4 + (r & 1) * 4;
        for (int32_t t = 0; t < k4; t++) d[s8_slot(t)] = (int16_t)((r < rows && t < k) ? src[r * row_step + t] : 0);
    }
}

void s8_widen(int16_t *d, const int8_t *s, int32_t n, int32_t offset)
{
    uint32_t off2 = s8_pair(offset, offset), e, o;
    int32_t t = 0;
    for (; t + 4 <= n; t += 4) {
        s8_quad(s8_load32(s + t), off2, &e, &o); /* (x0, x2), (x1, x3) */
        s8_store32(d + t, s8_pack_lo(e, o));
        s8_store32(d + t + 2, s8_pack_hi(e, o));
    }
    for (; t < n; t++) d[t] = (int16_t)(s[t] + offset);
}

/* ---- geometry ------------------------------------------------------------------------ */

typedef struct corr_geom {
    int32_t cin_g, cout_g, cout_g2, k, k4, quads;
    int32_t in_plane, out_plane;
    int32_t direct;         /* 1x1, stride 1, no padding: columns straight from NCHW */
    int32_t band_h, band_w; /* the widened band of two output rows (not direct) */
} corr_geom;

static corr_geom geometry(const s8_corr *c)
{
    corr_geom g;
    g.cin_g = c->in_c / c->groups;
    g.cout_g = c->out_c / c->groups;
    g.cout_g2 = s8_round2(g.cout_g);
    g.k = g.cin_g * c->kh * c->kw;
    g.k4 = s8_round4(g.k);
    g.quads = g.k4 >> 2;
    g.in_plane = c->in_h * c->in_w;
    g.out_plane = c->out_h * c->out_w;
    g.direct = c->kh == 1 && c->kw == 1 && c->stride_h == 1 && c->stride_w == 1 && c->pad_top == 0 &&
               c->pad_left == 0 && c->out_h == c->in_h && c->out_w == c->in_w;
    g.band_h = (c->out_h > 1 ? c->stride_h : 0) + c->kh;
    g.band_w = (c->out_w - 1) * c->stride_w + c->kw + 1; /* + a spare column: a pair's word read */
    return g;
}

/* ---- columns ------------------------------------------------------------------------- */

/* Columns col0 and col1 of a direct correlation: the group's channels at their positions
 * (channels past K read channel 0: A is 0 there). */
static void pack_direct_pair(const s8_corr *c, const corr_geom *g, int32_t group, int32_t col0, int32_t col1,
                             int16_t *b)
{
    int32_t p = g->in_plane;
    uint32_t off2 = s8_pair(-c->z, -c->z);
    const int8_t *x0 = c->in + ((col0 / p) * c->in_c + group * g->cin_g) * p + col0 % p;
    if (col1 == col0 + 1 && col0 % p != p - 1) { /* neighbours: one halfword per channel */
        for (int32_t t = 0; t < g->k; t += 4, b += 8) {
            uint32_t h0 = s8_load16(x0 + t * p);
            uint32_t h1 = t + 1 < g->k ? s8_load16(x0 + (t + 1) * p) : 0u;
            uint32_t h2 = t + 2 < g->k ? s8_load16(x0 + (t + 2) * p) : 0u;
            uint32_t h3 = t + 3 < g->k ? s8_load16(x0 + (t + 3) * p) : 0u;
            uint32_t w02 = h0 | (h2 << 16), w13 = h1 | (h3 << 16), q[4];
            s8_quad(w02, off2, &q[0], &q[2]); /* channel t, t+2 of col0; of col1 */
            s8_quad(w13, off2, &q[1], &q[3]);
            memcpy(b, q, 16);
        }
        return;
    }
    const int8_t *x1 = c->in + ((col1 / p) * c->in_c + group * g->cin_g) * p + col1 % p;
    for (int32_t t = 0; t < g->k4; t++) {
        int32_t ch = t < g->k ? t : 0;
        b[(t & ~3) * 2 + s8_slot(t & 3)] = (int16_t)(x0[ch * p] - c->z);
        b[(t & ~3) * 2 + 4 + s8_slot(t & 3)] = (int16_t)(x1[ch * p] - c->z);
    }
}

/* The input rows of output rows [r0, r0 + 2) of one sample and group, widened:
 * band[ci][t][u] = in[ci][r0 * sh - pt + t][u - pl] - z, 0 outside the input. */
static void fill_band(const s8_corr *c, const corr_geom *g, int32_t sample, int32_t group, int32_t r0,
                      int16_t *band)
{
    const int8_t *x = c->in + (sample * c->in_c + group * g->cin_g) * g->in_plane;
    int32_t row0 = r0 * c->stride_h - c->pad_top;
    int32_t u0 = s8_min(s8_max(c->pad_left, 0), g->band_w);            /* first column inside */
    int32_t u1 = s8_max(s8_min(c->pad_left + c->in_w, g->band_w), u0); /* past the last one */
    for (int32_t ci = 0; ci < g->cin_g; ci++, x += g->in_plane) {
        for (int32_t t = 0; t < g->band_h; t++, band += g->band_w) {
            int32_t row = row0 + t;
            if (row < 0 || row >= c->in_h) {
                for (int32_t u = 0; u < g->band_w; u++) band[u] = 0;
                continue;
            }
            for (int32_t u = 0; u < u0; u++) band[u] = 0;
            s8_widen(band + u0, x + row * c->in_w + u0 - c->pad_left, u1 - u0, -c->z);
            for (int32_t u = u1; u < g->band_w; u++) band[u] = 0;
        }
    }
}

static void tap_offsets(const s8_corr *c, const corr_geom *g, int32_t *off)
{
    int32_t t = 0;
    for (int32_t ci = 0; ci < g->cin_g; ci++)
        for (int32_t i = 0; i < c->kh; i++)
            for (int32_t j = 0; j < c->kw; j++) off[t++] = (ci * g->band_h + i) * g->band_w + j;
    for (; t < g->k4; t++) off[t] = 0; /* K's padding reads the first element (A is 0 there) */
}

static void pack_band_pair(const corr_geom *g, const int32_t *off, const int16_t *p0, const int16_t *p1, int16_t *b)
{
    uint32_t q[4];
    if (p1 == p0 + 1) { /* neighbours: each tap's word holds both columns */
        for (int32_t t = 0; t < g->k4; t += 4, b += 8, off += 4) {
            uint32_t w0 = s8_load32(p0 + off[0]), w1 = s8_load32(p0 + off[1]);
            uint32_t w2 = s8_load32(p0 + off[2]), w3 = s8_load32(p0 + off[3]);
            q[0] = s8_pack_lo(w0, w2), q[1] = s8_pack_lo(w1, w3);
            q[2] = s8_pack_hi(w0, w2), q[3] = s8_pack_hi(w1, w3);
            memcpy(b, q, 16);
        }
        return;
    }
    for (int32_t t = 0; t < g->k4; t += 4, b += 8, off += 4) {
        q[0] = s8_pack_lo((uint32_t)p0[off[0]], (uint32_t)p0[off[2]]);
        q[1] = s8_pack_lo((uint32_t)p0[off[1]], (uint32_t)p0[off[3]]);
        q[2] = s8_pack_lo((uint32_t)p1[off[0]], (uint32_t)p1[off[2]]);
        q[3] = s8_pack_lo((uint32_t)p1[off[1]], (uint32_t)p1[off[3]]);
        memcpy(b, q, 16);
    }
}

/* ---- blocks of columns -------------------------------------------------------------------
 * The accumulators of up to S8_BLOCK columns (in pairs) of every output channel of the
 * group are kept, acc[channel][column]; then each channel's epilogue runs over its columns
 * with its constants in registers. A block's columns are outputs col_step apart in y. */

#define S8_BLOCK 16

typedef struct block {
    int32_t ncols;
    int8_t *y;        /* the block's first column, the group's first channel */
    int32_t col_step; /* y elements between neighbouring columns */
} block;


S8_INLINE int32_t ssat8(int32_t v)
{
#if S8_DSP
    return __ssat(v, 8);
#else
    return v < -128 ? -128 : (v > 127 ? 127 : v);
#endif
}

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

typedef struct corr_out {
    s8_fwd_out *f;  /* the forward, or */
    s8_grad_out *q; /* the input gradient */
    s8_fwd_state st;
} corr_out;

typedef struct corr_ws {
    int16_t *a, *b, *band;
    uint32_t *acc, *init; /* init: each channel's first value (bias or 0), cout_g2 of them */
    int32_t *off;
} corr_ws;

static void run_block(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, const block *bl,
                      const int16_t *const *p0, const int32_t *cols, corr_out *o)
{
    int32_t pairs = g->cout_g2 >> 1, co = group * g->cout_g;
    for (int32_t j = 0; j < bl->ncols; j += 2) {
        int32_t j1 = j + 1 < bl->ncols ? j + 1 : j;
        if (p0)
            pack_band_pair(g, w->off, p0[j], p0[j1], w->b);
        else
            pack_direct_pair(c, g, group, cols[j], cols[j1], w->b);
        s8_tiles(g->quads, pairs, w->a, w->b, w->init, w->acc + j, S8_BLOCK);
    }
    if (o->f)
        s8_epi_fwd(w->acc, g->cout_g, S8_BLOCK, bl->ncols, bl->y, g->out_plane, bl->col_step, o->f->rq + co, 1, &o->st);
    else
        s8_epi_grad(w->acc, g->cout_g, S8_BLOCK, bl->ncols, bl->y, g->out_plane, bl->col_step, &o->q->ms, &o->q->amax);
}

static corr_ws carve(const corr_geom *g, void *ws)
{
    corr_ws w;
    uint8_t *p = (uint8_t *)ws;
    w.a = (int16_t *)p, p += s8_ws_part(2 * g->cout_g2 * g->k4);
    w.b = (int16_t *)p, p += s8_ws_part(2 * 2 * g->k4);
    w.acc = (uint32_t *)p, p += s8_ws_part(4 * g->cout_g2 * S8_BLOCK);
    w.init = (uint32_t *)p, p += s8_ws_part(4 * g->cout_g2);
    w.off = (int32_t *)p, p += s8_ws_part(4 * g->k4);
    w.band = (int16_t *)p;
    return w;
}

int32_t s8_corr_ws(const s8_corr *c)
{
    corr_geom g = geometry(c);
    int32_t bytes = s8_ws_part(2 * g.cout_g2 * g.k4) + s8_ws_part(2 * 2 * g.k4) + s8_ws_part(4 * g.cout_g2 * S8_BLOCK) +
                    s8_ws_part(4 * g.cout_g2);
    if (!g.direct)
        bytes += s8_ws_part(4 * g.k4) + s8_ws_part(2 * g.cin_g * g.band_h * g.band_w);
    return bytes;
}

/* 1x1: runs of positions of one sample, or of samples when a sample is one position. */
static void direct_blocks(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, int8_t *out,
                          corr_out *o)
{
    int32_t p = g->out_plane, cols[S8_BLOCK];
    int32_t total = c->n * p, per = p == 1 ? total : p;
    for (int32_t start = 0; start < total; start += per)
        for (int32_t j0 = 0; j0 < per; j0 += S8_BLOCK) {
            block bl = {s8_min(S8_BLOCK, per - j0), 0, p == 1 ? c->out_c : 1};
            int32_t col0 = start + j0;
            bl.y = out + ((col0 / p) * c->out_c + group * g->cout_g) * p + col0 % p;
            for (int32_t j = 0; j < bl.ncols; j++) cols[j] = col0 + j;
            run_block(c, g, group, w, &bl, 0, cols, o);
        }
}

/* Otherwise: two output rows at a time from the widened band. */
static void band_blocks(const s8_corr *c, const corr_geom *g, int32_t group, const corr_ws *w, int8_t *out,
                        corr_out *o)
{
    const int16_t *p0[S8_BLOCK];
    for (int32_t sample = 0; sample < c->n; sample++)
        for (int32_t r0 = 0; r0 < c->out_h; r0 += 2) {
            int32_t npos = s8_min(2, c->out_h - r0) * c->out_w;
            fill_band(c, g, sample, group, r0, w->band);
            for (int32_t j0 = 0; j0 < npos; j0 += S8_BLOCK) {
                block bl = {s8_min(S8_BLOCK, npos - j0), 0, 1};
                bl.y = out + (sample * c->out_c + group * g->cout_g) * g->out_plane + r0 * c->out_w + j0;
                for (int32_t j = 0; j < bl.ncols; j++) {
                    int32_t pos = j0 + j;
                    p0[j] = w->band + (pos / c->out_w) * c->stride_h * g->band_w + (pos % c->out_w) * c->stride_w;
                }
                run_block(c, g, group, w, &bl, p0, 0, o);
            }
        }
}

static void corr_run(const s8_corr *c, s8_pack_group pack, void *ctx, corr_out *o, void *ws)
{
    corr_geom g = geometry(c);
    corr_ws w = carve(&g, ws);
    int8_t *out = o->f ? o->f->y : o->q->g_x;
    if (!g.direct)
        tap_offsets(c, &g, w.off);
    for (int32_t group = 0; group < c->groups; group++) {
        pack(ctx, group, w.a);
        const int32_t *bias = o->f ? o->f->bias : 0;
        for (int32_t r = 0; r < g.cout_g2; r++)
            w.init[r] = bias && r < g.cout_g ? (uint32_t)bias[group * g.cout_g + r] : 0u;
        if (g.direct)
            direct_blocks(c, &g, group, &w, out, o);
        else
            band_blocks(c, &g, group, &w, out, o);
    }
}

void s8_corr_fwd(const s8_corr *c, s8_pack_group pack, void *ctx, s8_fwd_out *f, void *ws)
{
    corr_out o = {f, 0, s8_fwd_begin(f)};
    corr_run(c, pack, ctx, &o, ws);
    f->vmin = o.st.vmin;
    f->vmax = o.st.vmax;
}

void s8_corr_grad(const s8_corr *c, s8_pack_group pack, void *ctx, s8_grad_out *q, void *ws)
{
    corr_out o = {0, q, {0, 0, 0, 0, 0, 0, 0}};
    corr_run(c, pack, ctx, &o, ws);
}
