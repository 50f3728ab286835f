/* loss.c - softmax, log-softmax and negative log-likelihood, forward and backward.
 * Rows are independent; the max is subtracted before exponentiating, as PyTorch does. */
#include <math.h>

#include "poet_kernels.h"

void poet_softmax_fwd(int32_t rows, int32_t cols, const float *x, float *y)
{
    for (int32_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = xr[0];
        for (int32_t j = 1; j < cols; j++) mx = xr[j] > mx ? xr[j] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < cols; j++) {
            yr[j] = expf(xr[j] - mx);
            sum += yr[j];
        }
        for (int32_t j = 0; j < cols; j++) yr[j] /= sum;
    }
}

void poet_softmax_bwd(int32_t rows, int32_t cols, const float *dy, const float *y, float *dx)
{
    for (int32_t r = 0; r < rows; r++) {
        float dot = 0.0f;
        for (int32_t j = 0; j < cols; j++) dot += dy[r * cols + j] * y[r * cols + j];
        for (int32_t j = 0; j < cols; j++) dx[r * cols + j] = y[r * cols + j] * (dy[r * cols + j] - dot);
    }
}

void poet_log_softmax_fwd(int32_t rows, int32_t cols, const float *x, float *y)
{
    for (int32_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float mx = xr[0];
        for (int32_t j = 1; j < cols; j++) mx = xr[j] > mx ? xr[j] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < cols; j++) sum += expf(xr[j] - mx);
        const float lse = logf(sum);
        for (int32_t j = 0; j < cols; j++) y[r * cols + j] = xr[j] - mx - lse;
    }
}

void poet_log_softmax_bwd(int32_t rows, int32_t cols, const float *dy, const float *y, float *dx)
{
    for (int32_t r = 0; r < rows; r++) {
        float sum = 0.0f;
        for (int32_t j = 0; j < cols; j++) sum += dy[r * cols + j];
        for (int32_t j = 0; j < cols; j++) dx[r * cols + j] = dy[r * cols + j] - expf(y[r * cols + j]) * sum;
    }
}

void poet_nll_loss_fwd(int32_t rows, int32_t cols, const float *logp, const int32_t *target, int32_t ignore_index,
                       int32_t reduction, float *loss, float *total_weight)
{
    float sum = 0.0f, count = 0.0f;
    for (int32_t r = 0; r < rows; r++) {
        const int32_t t = target[r];
        const float v = (t == ignore_index || t < 0 || t >= cols) ? 0.0f : -logp[r * cols + t];
        if (t != ignore_index) count += 1.0f;
        if (reduction == 0) loss[r] = v;
        else sum += v;
    }
    if (reduction == 1) loss[0] = sum / count;
    else if (reduction == 2) loss[0] = sum;
    if (total_weight) total_weight[0] = count;
}

void poet_nll_loss_bwd(int32_t rows, int32_t cols, const float *grad_loss, const int32_t *target,
                       int32_t ignore_index, int32_t reduction, const float *total_weight, float *dx)
{
    for (int32_t k = 0; k < rows * cols; k++) dx[k] = 0.0f;
    for (int32_t r = 0; r < rows; r++) {
        const int32_t t = target[r];
        if (t == ignore_index || t < 0 || t >= cols) continue;
        float g = reduction == 0 ? grad_loss[r] : grad_loss[0];
        if (reduction == 1) g /= total_weight[0];
        dx[r * cols + t] = -g;
    }
}
