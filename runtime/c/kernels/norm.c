/* norm.c - batch normalization in training mode, forward and backward (NCHW, float32).
 *
 * Mean and variance are two passes over each channel (mean first, then the centred
 * squares), which is what PyTorch's CPU kernel computes too and is far better
 * conditioned than E[x^2] - E[x]^2 in float32.
 *
 * Every per-channel sum is compensated (Kahan): the backward's sum(dy * (x - mean))
 * is a difference of large terms that nearly cancel when the loss is almost invariant
 * to the channel's scale (a BN -> ReLU -> depthwise conv -> BN chain: only eps breaks
 * the invariance), and a plain float32 running sum over n*h*w terms then loses most of
 * the gamma gradient's digits. Compensation costs 3 extra FPU adds per term and keeps
 * the sums to about one rounding error, with no double arithmetic (soft-float on an M4). */
#include <math.h>

#include "poet_kernels.h"

/* A compensated running sum: s.sum + s.carry is the exact sum to about one ulp. */
typedef struct ksum {
    float sum, carry;
} ksum;

static void kadd(ksum *s, float v)
{
    const float y = v - s->carry;
    const float t = s->sum + y;
    s->carry = (t - s->sum) - y;
    s->sum = t;
}

void poet_batchnorm_fwd_train(const poet_bn_shape *s, const float *x, const float *gamma, const float *beta,
                              float *y, float *save_mean, float *save_invstd,
                              const float *run_mean, const float *run_var, float *new_mean, float *new_var)
{
    const int32_t m = s->n * s->hw;
    for (int32_t c = 0; c < s->c; c++) {
        ksum sum = {0.0f, 0.0f};
        for (int32_t n = 0; n < s->n; n++) {
            const float *xc = x + ((int32_t)n * s->c + c) * s->hw;
            for (int32_t k = 0; k < s->hw; k++) kadd(&sum, xc[k]);
        }
        const float mean = sum.sum / (float)m;
        ksum sqs = {0.0f, 0.0f};
        for (int32_t n = 0; n < s->n; n++) {
            const float *xc = x + ((int32_t)n * s->c + c) * s->hw;
            for (int32_t k = 0; k < s->hw; k++) {
                const float d = xc[k] - mean;
                kadd(&sqs, d * d);
            }
        }
        const float sq = sqs.sum;
        const float var = sq / (float)m;  /* biased: what normalizes the batch */
        const float invstd = 1.0f / sqrtf(var + s->eps);
        const float g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
        for (int32_t n = 0; n < s->n; n++) {
            const float *xc = x + ((int32_t)n * s->c + c) * s->hw;
            float *yc = y + ((int32_t)n * s->c + c) * s->hw;
            for (int32_t k = 0; k < s->hw; k++) yc[k] = (xc[k] - mean) * invstd * g + b;
        }
        if (save_mean) save_mean[c] = mean;
        if (save_invstd) save_invstd[c] = invstd;
        if (run_mean && run_var && new_mean && new_var) {
            const float unbiased = m > 1 ? sq / (float)(m - 1) : var;
            new_mean[c] = (1.0f - s->momentum) * run_mean[c] + s->momentum * mean;
            new_var[c] = (1.0f - s->momentum) * run_var[c] + s->momentum * unbiased;
        }
    }
}

void poet_batchnorm_bwd(const poet_bn_shape *s, const float *dy, const float *x, const float *gamma,
                        const float *save_mean, const float *save_invstd,
                        float *dx, float *dgamma, float *dbeta)
{
    const int32_t m = s->n * s->hw;
    for (int32_t c = 0; c < s->c; c++) {
        const float mean = save_mean[c], invstd = save_invstd[c];
        /* sum_dy = sum dy, dot = sum dy * (x - mean): the two reductions of the backward. */
        ksum sdy = {0.0f, 0.0f}, sdot = {0.0f, 0.0f};
        for (int32_t n = 0; n < s->n; n++) {
            const float *xc = x + ((int32_t)n * s->c + c) * s->hw;
            const float *dyc = dy + ((int32_t)n * s->c + c) * s->hw;
            for (int32_t k = 0; k < s->hw; k++) {
                kadd(&sdy, dyc[k]);
                kadd(&sdot, dyc[k] * (xc[k] - mean));
            }
        }
        const float sum_dy = sdy.sum, dot = sdot.sum;
        if (dgamma) dgamma[c] = dot * invstd;
        if (dbeta) dbeta[c] = sum_dy;
        if (dx) {
            /* dx = gamma * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) */
            const float g = gamma ? gamma[c] : 1.0f;
            const float mean_dy = sum_dy / (float)m;
            const float proj = dot * invstd * invstd / (float)m;
            for (int32_t n = 0; n < s->n; n++) {
                const float *xc = x + ((int32_t)n * s->c + c) * s->hw;
                const float *dyc = dy + ((int32_t)n * s->c + c) * s->hw;
                float *dxc = dx + ((int32_t)n * s->c + c) * s->hw;
                for (int32_t k = 0; k < s->hw; k++)
                    dxc[k] = (dyc[k] - mean_dy - (xc[k] - mean) * proj) * invstd * g;
            }
        }
    }
}
