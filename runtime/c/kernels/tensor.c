/* tensor.c - the generic strided kernels: element-wise ops with broadcasting, sums over
 * dimensions, and matrix products. They take PyTorch views as they are (pointer plus
 * element strides), so a transpose, reshape or expand never needs a copy. */
#include "poet_kernels.h"

/* The POET_MAX_DIMS-d loop nest, padded with leading size-1 dims; pos[] is the index. */
static void pad_dims(int32_t ndim, const int32_t *size, int32_t out[POET_MAX_DIMS])
{
    for (int32_t d = 0; d < POET_MAX_DIMS; d++) {
        int32_t src = d - (POET_MAX_DIMS - ndim);
        out[d] = src >= 0 ? size[src] : 1;
    }
}

static void pad_strides(int32_t ndim, const int32_t *stride, int32_t out[POET_MAX_DIMS])
{
    for (int32_t d = 0; d < POET_MAX_DIMS; d++) {
        int32_t src = d - (POET_MAX_DIMS - ndim);
        out[d] = (src >= 0 && stride) ? stride[src] : 0;
    }
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

void poet_ewise(int op, int32_t ndim, const int32_t *size, float *y,
                const float *a, const int32_t *a_stride, const float *b, const int32_t *b_stride, float scalar)
{
    int32_t sz[POET_MAX_DIMS], sa[POET_MAX_DIMS], sb[POET_MAX_DIMS];
    pad_dims(ndim, size, sz);
    pad_strides(ndim, a_stride, sa);
    pad_strides(ndim, b_stride, sb);
    int32_t k = 0;
    for (int32_t i0 = 0; i0 < sz[0]; i0++)
        for (int32_t i1 = 0; i1 < sz[1]; i1++)
            for (int32_t i2 = 0; i2 < sz[2]; i2++)
                for (int32_t i3 = 0; i3 < sz[3]; i3++) {
                    float va = a ? a[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]] : 0.0f;
                    float vb = b ? b[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]] : 0.0f;
                    y[k++] = apply(op, va, vb, scalar);
                }
}

void poet_reduce_sum(int32_t ndim, const int32_t *size, const float *x, const int32_t *x_stride,
                     uint32_t reduce_mask, float divisor, float *y)
{
    int32_t sz[POET_MAX_DIMS], sx[POET_MAX_DIMS], keep[POET_MAX_DIMS], ysz[POET_MAX_DIMS], ys[POET_MAX_DIMS];
    pad_dims(ndim, size, sz);
    pad_strides(ndim, x_stride, sx);
    for (int32_t d = 0; d < POET_MAX_DIMS; d++) {
        int32_t src = d - (POET_MAX_DIMS - ndim);
        keep[d] = !(src >= 0 && (reduce_mask >> src) & 1u);
        ysz[d] = keep[d] ? sz[d] : 1;
    }
    /* Contiguous strides of y over the kept dims (reduced dims have size 1 there). */
    ys[POET_MAX_DIMS - 1] = 1;
    for (int32_t d = POET_MAX_DIMS - 2; d >= 0; d--) ys[d] = ys[d + 1] * ysz[d + 1];
    int32_t y_count = ysz[0] * ysz[1] * ysz[2] * ysz[3];
    for (int32_t k = 0; k < y_count; k++) y[k] = 0.0f;
    /* Accumulate in input order; each output element sums its inputs in index order. */
    for (int32_t i0 = 0; i0 < sz[0]; i0++)
        for (int32_t i1 = 0; i1 < sz[1]; i1++)
            for (int32_t i2 = 0; i2 < sz[2]; i2++)
                for (int32_t i3 = 0; i3 < sz[3]; i3++) {
                    int32_t yo = (keep[0] ? i0 * ys[0] : 0) + (keep[1] ? i1 * ys[1] : 0)
                               + (keep[2] ? i2 * ys[2] : 0) + (keep[3] ? i3 * ys[3] : 0);
                    y[yo] += x[i0 * sx[0] + i1 * sx[1] + i2 * sx[2] + i3 * sx[3]];
                }
    if (divisor != 1.0f)
        for (int32_t k = 0; k < y_count; k++) y[k] /= divisor;
}

void poet_matmul(int32_t m, int32_t k, int32_t n, const float *a, int32_t a_s0, int32_t a_s1,
                 const float *b, int32_t b_s0, int32_t b_s1, const float *c, int32_t c_s0, int32_t c_s1,
                 float beta, float alpha, float *y)
{
    for (int32_t i = 0; i < m; i++) {
        for (int32_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int32_t p = 0; p < k; p++) acc += a[i * a_s0 + p * a_s1] * b[p * b_s0 + j * b_s1];
            float out = alpha * acc;
            if (c) out += beta * c[i * c_s0 + j * c_s1];
            y[i * n + j] = out;
        }
    }
}
