/* tensor.c - the generic strided kernels: element-wise ops with broadcasting, sums over
 * dimensions, and matrix products. They take PyTorch views as they are (pointer plus
 * element strides), so a transpose, reshape or expand never needs a copy.
 *
 * Each first merges the dimensions it can (size 1, or contiguous in every operand), so
 * most calls are one loop over a contiguous run; that inner loop is specialised by op
 * and by operand stride (contiguous, broadcast, other). A broadcast operand with a
 * scalar one gives the same value all along the run: it is computed once and stored
 * (an expanded gradient divided by a count, the mean's backward). */
#include "poet_kernels.h"

#if defined(__GNUC__)
typedef uint32_t __attribute__((may_alias)) word32;
#else
typedef uint32_t word32;
#endif

/* Sizes and strides of up to 3 operands, merged: dims of size 1 dropped, and a dim folded
 * into the next inner one where every operand steps over it contiguously. Returns ndim. */
static int32_t merge_dims(int32_t ndim, const int32_t *size, const int32_t *const st[3], int32_t out_size[POET_MAX_DIMS],
                          int32_t out_st[3][POET_MAX_DIMS])
{
    int32_t n = 0;
    for (int32_t d = 0; d < ndim; d++) {
        if (size[d] == 1) continue;
        out_size[n] = size[d];
        for (int o = 0; o < 3; o++) out_st[o][n] = st[o] ? st[o][d] : 0;
        if (n > 0) {
            int fold = 1;
            for (int o = 0; o < 3; o++) fold &= out_st[o][n - 1] == out_st[o][n] * out_size[n];
            if (fold) {
                out_size[n - 1] *= out_size[n];
                for (int o = 0; o < 3; o++) out_st[o][n - 1] = out_st[o][n];
                continue;
            }
        }
        n++;
    }
    return n;
}

static float apply(int op, float a, float b, float scalar)
{
    switch (op) {
    case POET_EW_COPY: return a;
    case POET_EW_FILL: return scalar;
    case POET_EW_ADD: return a + scalar * b;
    case POET_EW_SUB: return a - scalar * b;
    case POET_EW_MUL: return a * b;
    case POET_EW_DIV: return a / b;
    case POET_EW_ADD_SCALAR: return a + scalar;
    case POET_EW_MUL_SCALAR: return a * scalar;
    case POET_EW_DIV_SCALAR: return a / scalar;
    default: return 0.0f;
    }
}

static void fill(int32_t n, float *y, float v)
{
    int32_t k = 0;
    for (; k + 4 <= n; k += 4) y[k] = v, y[k + 1] = v, y[k + 2] = v, y[k + 3] = v;
    for (; k < n; k++) y[k] = v;
}

void poet_copy_words(int32_t n, void *dst, const void *src)
{
    word32 *y = (word32 *)dst;
    const word32 *a = (const word32 *)src;
    int32_t k = 0;
#if defined(__GNUC__) && defined(__ARM_ARCH_7EM__) && defined(__thumb2__)
    /* 16 words per iteration, 4 LDM/STM pairs (GCC does not merge the loads itself). */
    int32_t blocks = n / 16;
    if (blocks > 0) {
        __asm__ volatile(
            "1:\n\t"
            "ldmia %[a]!, {r4, r5, r6, r7}\n\tstmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[a]!, {r4, r5, r6, r7}\n\tstmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[a]!, {r4, r5, r6, r7}\n\tstmia %[y]!, {r4, r5, r6, r7}\n\t"
            "ldmia %[a]!, {r4, r5, r6, r7}\n\tstmia %[y]!, {r4, r5, r6, r7}\n\t"
            "subs %[n], %[n], #1\n\t"
            "bne 1b"
            : [a] "+r"(a), [y] "+r"(y), [n] "+r"(blocks)
            :
            : "r4", "r5", "r6", "r7", "cc", "memory");
        k = n / 16 * 16;
    }
#endif
    for (; k + 4 <= n; k += 4, a += 4, y += 4) {
        const uint32_t v0 = a[0], v1 = a[1], v2 = a[2], v3 = a[3];
        y[0] = v0, y[1] = v1, y[2] = v2, y[3] = v3;
    }
    for (; k < n; k++) *y++ = *a++;
}

/* One contiguous run of the output: y[k] = op(a[k * sa], b[k * sb]). */
static void ewise_run(int op, int32_t n, float *y, const float *a, int32_t sa, const float *b, int32_t sb, float s)
{
    const int binary = op == POET_EW_ADD || op == POET_EW_SUB || op == POET_EW_MUL || op == POET_EW_DIV;
    if (op == POET_EW_FILL) {
        fill(n, y, s);
        return;
    }
    if (sa == 0 && (!binary || sb == 0)) { /* one value all along */
        fill(n, y, apply(op, a[0], binary ? b[0] : 0.0f, s));
        return;
    }
    if (op == POET_EW_COPY && sa == 1) {
        poet_copy_words(n, y, a);
        return;
    }
    if (!binary && sa == 1) {
        int32_t k = 0;
        switch (op) {
        case POET_EW_ADD_SCALAR:
            for (; k + 2 <= n; k += 2) y[k] = a[k] + s, y[k + 1] = a[k + 1] + s;
            break;
        case POET_EW_MUL_SCALAR:
            for (; k + 2 <= n; k += 2) y[k] = a[k] * s, y[k + 1] = a[k + 1] * s;
            break;
        case POET_EW_DIV_SCALAR:
            for (; k + 2 <= n; k += 2) y[k] = a[k] / s, y[k + 1] = a[k + 1] / s;
            break;
        default:
            break;
        }
        for (; k < n; k++) y[k] = apply(op, a[k], 0.0f, s);
        return;
    }
    if (binary && sa == 1 && sb == 1) {
        int32_t k = 0;
        switch (op) {
        case POET_EW_ADD:
            if (s == 1.0f)
                for (; k + 2 <= n; k += 2) y[k] = a[k] + b[k], y[k + 1] = a[k + 1] + b[k + 1];
            break;
        case POET_EW_MUL:
            for (; k + 2 <= n; k += 2) y[k] = a[k] * b[k], y[k + 1] = a[k + 1] * b[k + 1];
            break;
        default:
            break;
        }
        for (; k < n; k++) y[k] = apply(op, a[k], b[k], s);
        return;
    }
    for (int32_t k = 0; k < n; k++) y[k] = apply(op, a[k * sa], binary ? b[k * sb] : 0.0f, s);
}

void poet_ewise(int op, int32_t ndim, const int32_t *size, float *y,
                const float *a, const int32_t *a_stride, const float *b, const int32_t *b_stride, float scalar)
{
    int32_t sz[POET_MAX_DIMS], st[3][POET_MAX_DIMS];
    int32_t y_st[POET_MAX_DIMS];
    /* y is contiguous */
    int32_t acc = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) y_st[d] = acc, acc *= size[d];
    const int32_t *strides[3] = {y_st, a ? a_stride : 0, b ? b_stride : 0};
    int32_t n = merge_dims(ndim, size, strides, sz, st);
    if (n == 0) { /* one element */
        n = 1;
        sz[0] = 1;
        for (int o = 0; o < 3; o++) st[o][0] = 0;
    }
    /* Outer dims by an odometer over the index, the innermost by ewise_run. */
    int32_t idx[POET_MAX_DIMS] = {0, 0, 0, 0};
    const int32_t inner = n - 1, count = acc;
    int32_t yo = 0, ao = 0, bo = 0;
    for (int32_t done = 0; done < count; done += sz[inner]) {
        ewise_run(op, sz[inner], y + yo, a ? a + ao : 0, st[1][inner], b ? b + bo : 0, st[2][inner], scalar);
        for (int32_t d = inner - 1; d >= 0; d--) {
            yo += st[0][d], ao += st[1][d], bo += st[2][d];
            if (++idx[d] < sz[d]) break;
            yo -= st[0][d] * sz[d], ao -= st[1][d] * sz[d], bo -= st[2][d] * sz[d];
            idx[d] = 0;
        }
    }
}

/* Sum of n values s apart, four running sums added pairwise at the end. */
static float sum_run(int32_t n, const float *x, int32_t s)
{
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int32_t k = 0;
    if (s == 1)
        for (; k + 4 <= n; k += 4, x += 4) a0 += x[0], a1 += x[1], a2 += x[2], a3 += x[3];
    for (; k < n; k++, x += s) a0 += *x;
    return (a0 + a1) + (a2 + a3);
}

void poet_reduce_sum(int32_t ndim, const int32_t *size, const float *x, const int32_t *x_stride,
                     uint32_t reduce_mask, float divisor, float *y)
{
    /* Kept dims first (in order, y's layout), then reduced ones; merged within each kind. */
    int32_t ksz[POET_MAX_DIMS], kst[POET_MAX_DIMS], rsz[POET_MAX_DIMS], rst[POET_MAX_DIMS];
    int32_t nk = 0, nr = 0;
    for (int32_t d = 0; d < ndim; d++) {
        if (size[d] == 1) continue;
        const int red = (reduce_mask >> d) & 1u;
        int32_t *sz = red ? rsz : ksz, *st = red ? rst : kst, *n = red ? &nr : &nk;
        if (*n > 0 && st[*n - 1] == x_stride[d] * size[d]) {
            sz[*n - 1] *= size[d];
            st[*n - 1] = x_stride[d];
        } else {
            sz[*n] = size[d], st[*n] = x_stride[d];
            (*n)++;
        }
    }
    int32_t y_count = 1;
    for (int32_t d = 0; d < nk; d++) y_count *= ksz[d];
    int32_t kidx[POET_MAX_DIMS] = {0, 0, 0, 0};
    int32_t xo = 0;
    for (int32_t k = 0; k < y_count; k++) {
        /* the reduced dims: the innermost as a run, the others by an odometer */
        float total = 0.0f;
        if (nr == 0) {
            total = x[xo];
        } else {
            int32_t ridx[POET_MAX_DIMS] = {0, 0, 0, 0}, ro = 0, runs = 1;
            for (int32_t d = 0; d < nr - 1; d++) runs *= rsz[d];
            for (int32_t r = 0; r < runs; r++) {
                total += sum_run(rsz[nr - 1], x + xo + ro, rst[nr - 1]);
                for (int32_t d = nr - 2; d >= 0; d--) {
                    ro += rst[d];
                    if (++ridx[d] < rsz[d]) break;
                    ro -= rst[d] * rsz[d];
                    ridx[d] = 0;
                }
            }
        }
        y[k] = divisor != 1.0f ? total / divisor : total;
        for (int32_t d = nk - 1; d >= 0; d--) {
            xo += kst[d];
            if (++kidx[d] < ksz[d]) break;
            xo -= kst[d] * ksz[d];
            kidx[d] = 0;
        }
    }
}

void poet_matmul(int32_t m, int32_t k, int32_t n, const float *a, int32_t a_s0, int32_t a_s1,
                 const float *b, int32_t b_s0, int32_t b_s1, const float *c, int32_t c_s0, int32_t c_s1,
                 float beta, float alpha, float *y)
{
    /* Four outputs of a row at a time: one load of a and four of b per step. */
    for (int32_t i = 0; i < m; i++) {
        int32_t j = 0;
        for (; j + 4 <= n; j += 4) {
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            const float *ap = a + i * a_s0, *bp = b + j * b_s1;
            for (int32_t p = 0; p < k; p++, ap += a_s1, bp += b_s0) {
                const float av = *ap;
                s0 += av * bp[0];
                s1 += av * bp[b_s1];
                s2 += av * bp[2 * b_s1];
                s3 += av * bp[3 * b_s1];
            }
            const float acc[4] = {s0, s1, s2, s3};
            for (int q = 0; q < 4; q++) {
                float out = alpha * acc[q];
                if (c) out += beta * c[i * c_s0 + (j + q) * c_s1];
                y[i * n + j + q] = out;
            }
        }
        for (; j < n; j++) {
            float acc = 0.0f;
            for (int32_t p = 0; p < k; p++) acc += a[i * a_s0 + p * a_s1] * b[p * b_s0 + j * b_s1];
            float out = alpha * acc;
            if (c) out += beta * c[i * c_s0 + j * c_s1];
            y[i * n + j] = out;
        }
    }
}
