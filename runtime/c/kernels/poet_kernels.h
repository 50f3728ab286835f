/*
 * poet_kernels.h - reference float32 kernels for training on a microcontroller.
 *
 * Forward and backward of the ops that the MCU models use (conv2d incl. depthwise and
 * pointwise, matmul/linear, training-mode batch norm, ReLU/ReLU6, max pooling, global
 * average pooling via reductions, element-wise ops with broadcasting, softmax,
 * log-softmax and negative log-likelihood). Written for clarity first: plain loops in
 * the order of the maths, one kernel per aten op, so that each can be read next to
 * PyTorch's definition. No malloc, no stdio; only <stdint.h> and <math.h>.
 *
 * Conventions shared by every kernel:
 *   - tensors are float32 unless the name says otherwise; conv, batch norm and pooling
 *     take contiguous NCHW tensors;
 *   - the generic kernels (poet_ewise, poet_reduce_sum, poet_matmul) take each operand
 *     as a pointer plus element strides, so PyTorch views (transpose, expand, reshape)
 *     cost no copy: the generator passes the view's strides;
 *   - outputs never alias inputs, and every output element is written (kernels that
 *     accumulate zero their output first), so a recomputation produces the same bytes.
 */
#ifndef POET_KERNELS_H
#define POET_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POET_MAX_DIMS 4

/* ---- convolution (conv.c) ---------------------------------------------------------
 * y[n, co, oh, ow] = bias[co] + sum_{ci in group(co), i, j}
 *                    w[co, ci - g0, i, j] * x[n, ci, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
 * groups == c_in == c_out is a depthwise convolution, kh == kw == 1 a pointwise one. */
typedef struct poet_conv2d_shape {
    int32_t n, c_in, h_in, w_in;
    int32_t c_out, h_out, w_out;
    int32_t kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
} poet_conv2d_shape;

void poet_conv2d_fwd(const poet_conv2d_shape *s, const float *x, const float *w, const float *bias, float *y);
/* dx = d(loss)/dx from dy; dw likewise; db[co] = sum over n, oh, ow of dy. */
void poet_conv2d_bwd_input(const poet_conv2d_shape *s, const float *dy, const float *w, float *dx);
void poet_conv2d_bwd_weight(const poet_conv2d_shape *s, const float *dy, const float *x, float *dw);
void poet_conv2d_bwd_bias(const poet_conv2d_shape *s, const float *dy, float *db);

/* ---- batch norm, training mode (norm.c) -------------------------------------------
 * Statistics over n and hw per channel c. save_mean/save_invstd are what the backward
 * reads (invstd = 1/sqrt(biased var + eps)). With running statistics (run_mean and
 * run_var not NULL) the new values go to new_mean/new_var:
 *   new_mean = (1 - momentum) run_mean + momentum mean,
 *   new_var  = (1 - momentum) run_var  + momentum var * m/(m-1)   (m = n*hw, unbiased).
 * They are separate outputs, not updated in place, so recomputing the forward (which a
 * schedule may do) leaves them right. gamma/beta NULL mean 1/0 (affine=False). */
typedef struct poet_bn_shape {
    int32_t n, c, hw;
    float eps, momentum;
} poet_bn_shape;

void poet_batchnorm_fwd_train(const poet_bn_shape *s, const float *x, const float *gamma, const float *beta,
                              float *y, float *save_mean, float *save_invstd,
                              const float *run_mean, const float *run_var, float *new_mean, float *new_var);
/* Any of dx, dgamma, dbeta may be NULL (not requested). */
void poet_batchnorm_bwd(const poet_bn_shape *s, const float *dy, const float *x, const float *gamma,
                        const float *save_mean, const float *save_invstd,
                        float *dx, float *dgamma, float *dbeta);

/* ---- activations (activation.c) ---------------------------------------------------- */
void poet_relu_fwd(int32_t count, const float *x, float *y);
/* aten.threshold_backward: dx = (x <= threshold) ? 0 : dy, with x the ReLU's input or output. */
void poet_threshold_bwd(int32_t count, const float *dy, const float *x, float threshold, float *dx);
/* Hardtanh (ReLU6 is hardtanh(0, 6)): y = min(max(x, lo), hi); dx = (x <= lo || x >= hi) ? 0 : dy. */
void poet_hardtanh_fwd(int32_t count, const float *x, float lo, float hi, float *y);
void poet_hardtanh_bwd(int32_t count, const float *dy, const float *x, float lo, float hi, float *dx);

/* ---- pooling (pool.c) --------------------------------------------------------------
 * Max pooling over NCHW; idx holds, per output element, the flat index ih*w_in + iw of
 * the chosen input in its plane (PyTorch's convention; the first maximum wins). */
typedef struct poet_pool2d_shape {
    int32_t n, c, h_in, w_in, h_out, w_out;
    int32_t kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
} poet_pool2d_shape;

void poet_maxpool2d_fwd(const poet_pool2d_shape *s, const float *x, float *y, int32_t *idx);
void poet_maxpool2d_bwd(const poet_pool2d_shape *s, const float *dy, const int32_t *idx, float *dx);
/* Average pooling, padding counted in the divisor (count_include_pad=True, PyTorch's default). */
void poet_avgpool2d_fwd(const poet_pool2d_shape *s, const float *x, float *y);
void poet_avgpool2d_bwd(const poet_pool2d_shape *s, const float *dy, float *dx);

/* ---- generic strided kernels (tensor.c) --------------------------------------------
 * An operand is a pointer plus POET_MAX_DIMS element strides over the output's sizes
 * (stride 0 broadcasts: PyTorch's expand). Outputs are contiguous. ndim 0 = one element. */
enum poet_ewise_op {
    POET_EW_COPY = 0,     /* y = a */
    POET_EW_FILL,         /* y = scalar */
    POET_EW_ADD,          /* y = a + scalar * b (aten.add with alpha) */
    POET_EW_SUB,          /* y = a - scalar * b */
    POET_EW_MUL,          /* y = a * b */
    POET_EW_DIV,          /* y = a / b */
    POET_EW_ADD_SCALAR,   /* y = a + scalar */
    POET_EW_MUL_SCALAR,   /* y = a * scalar */
    POET_EW_DIV_SCALAR    /* y = a / scalar */
};

void poet_ewise(int op, int32_t ndim, const int32_t *size, float *y,
                const float *a, const int32_t *a_stride, const float *b, const int32_t *b_stride, float scalar);
/* dst[0..n) = src[0..n), n 32-bit words (float32 or int32; 4-byte aligned, no overlap). */
void poet_copy_words(int32_t n, void *dst, const void *src);
/* y = (sum over the dims whose bit is set in reduce_mask of x) / divisor, y contiguous
 * over the kept dims (aten.sum.dim_IntList with divisor 1, aten.mean.dim with the count). */
void poet_reduce_sum(int32_t ndim, const int32_t *size, const float *x, const int32_t *x_stride,
                     uint32_t reduce_mask, float divisor, float *y);
/* y[m x n] (contiguous) = beta * c + alpha * a[m x k] @ b[k x n]; c may be NULL (aten.mm),
 * else it is read with strides (c_s0, c_s1): (0, 1) broadcasts a bias over the rows. */
void poet_matmul(int32_t m, int32_t k, int32_t n, const float *a, int32_t a_s0, int32_t a_s1,
                 const float *b, int32_t b_s0, int32_t b_s1, const float *c, int32_t c_s0, int32_t c_s1,
                 float beta, float alpha, float *y);

/* ---- softmax and losses (loss.c), over the last dim of a contiguous rows x cols ---- */
void poet_softmax_fwd(int32_t rows, int32_t cols, const float *x, float *y);
void poet_softmax_bwd(int32_t rows, int32_t cols, const float *dy, const float *y, float *dx);
void poet_log_softmax_fwd(int32_t rows, int32_t cols, const float *x, float *y);
/* dx = dy - exp(y) * sum(dy) per row, y the log-softmax output. */
void poet_log_softmax_bwd(int32_t rows, int32_t cols, const float *dy, const float *y, float *dx);
/* Negative log-likelihood of class targets (int32), no class weights. reduction: 0 none
 * (loss has rows entries), 1 mean, 2 sum. total_weight = number of targets not equal to
 * ignore_index (PyTorch's second output). */
void poet_nll_loss_fwd(int32_t rows, int32_t cols, const float *logp, const int32_t *target, int32_t ignore_index,
                       int32_t reduction, float *loss, float *total_weight);
void poet_nll_loss_bwd(int32_t rows, int32_t cols, const float *grad_loss, const int32_t *target,
                       int32_t ignore_index, int32_t reduction, const float *total_weight, float *dx);

/* ---- optimizer updates, in place (optim.c; docs/training.md) ------------------------
 * torch.optim's single-tensor SGD (dampening 0; momentum buffer starting at zero) and
 * Adam/AdamW (no amsgrad; step a float32 counter, the bias corrections in double). */
typedef struct poet_sgd_attr {
    float lr, momentum, weight_decay;
    int32_t nesterov;
} poet_sgd_attr;

typedef struct poet_adam_attr {
    double lr, beta1, beta2, weight_decay;
    float eps;
    int32_t decoupled;
} poet_adam_attr;

void poet_sgd(int32_t count, float *param, const float *grad, float lr, float weight_decay);
void poet_sgd_momentum(int32_t count, float *param, const float *grad, float *buf, const poet_sgd_attr *a);
void poet_adam(int32_t count, float *param, const float *grad, float *exp_avg, float *exp_avg_sq, float *step,
               const poet_adam_attr *a);

#ifdef __cplusplus
}
#endif
#endif /* POET_KERNELS_H */
