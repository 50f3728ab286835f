/*
 * optim.c - optimizer updates, in place: the parameter and its state arrays are
 * overwritten (docs/training.md). Each follows torch.optim's single-tensor path
 * (foreach=False) operation by operation, in float32, with the step-dependent Adam
 * scalars in double as torch.optim computes them in Python floats.
 */
#include <math.h>

#include "poet_kernels.h"

void poet_sgd(int32_t count, float *param, const float *grad, float lr, float weight_decay)
{
    for (int32_t i = 0; i < count; i++) {
        float g = grad[i];
        if (weight_decay != 0.0f) g = g + weight_decay * param[i];
        param[i] = param[i] + (-lr) * g;
    }
}

void poet_sgd_momentum(int32_t count, float *param, const float *grad, float *buf, const poet_sgd_attr *a)
{
    for (int32_t i = 0; i < count; i++) {
        float g = grad[i];
        if (a->weight_decay != 0.0f) g = g + a->weight_decay * param[i];
        /* The buffer starts at zero: 0 * m + g is torch.optim's first-step clone(g). */
        float b = buf[i] * a->momentum;
        b = b + g;
        buf[i] = b;
        float step = a->nesterov ? g + a->momentum * b : b;
        param[i] = param[i] + (-a->lr) * step;
    }
}

void poet_adam(int32_t count, float *param, const float *grad, float *exp_avg, float *exp_avg_sq, float *step,
               const poet_adam_attr *a)
{
    step[0] = step[0] + 1.0f;
    double n = (double)step[0];
    double bias_correction1 = 1.0 - pow(a->beta1, n);
    double bias_correction2 = 1.0 - pow(a->beta2, n);
    float neg_step_size = (float)(-(a->lr / bias_correction1));
    float bc2_sqrt = (float)sqrt(bias_correction2);
    float one_minus_beta1 = (float)(1.0 - a->beta1);
    float beta2 = (float)a->beta2;
    float one_minus_beta2 = (float)(1.0 - a->beta2);
    float decay = (float)(1.0 - a->lr * a->weight_decay);
    float weight_decay = (float)a->weight_decay;
    for (int32_t i = 0; i < count; i++) {
        float p = param[i];
        float g = grad[i];
        if (a->weight_decay != 0.0) {
            if (a->decoupled) p = p * decay;
            else g = g + weight_decay * p;
        }
        /* lerp(m, g, w) with w < 0.5: m + w * (g - m), as ATen's lerp. */
        float m = exp_avg[i];
        m = one_minus_beta1 < 0.5f ? m + one_minus_beta1 * (g - m) : g - (g - m) * (1.0f - one_minus_beta1);
        float v = exp_avg_sq[i] * beta2;
        v = v + one_minus_beta2 * g * g;
        float denom = sqrtf(v) / bc2_sqrt + a->eps;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        param[i] = p + neg_step_size * m / denom;
    }
}
