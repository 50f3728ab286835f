/* activation.c - ReLU and hardtanh (ReLU6), forward and backward. */
#include "poet_kernels.h"

void poet_relu_fwd(int32_t count, const float *x, float *y)
{
    for (int32_t k = 0; k < count; k++) y[k] = x[k] > 0.0f ? x[k] : 0.0f;
}

void poet_threshold_bwd(int32_t count, const float *dy, const float *x, float threshold, float *dx)
{
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
