/* norm.c - batch normalization in training mode, forward and backward (NCHW, float32).
 *
 * Mean and variance are two passes over each channel (mean first, then the centred
 * squares), which is what PyTorch's CPU kernel computes too and is far better
 * conditioned than E[x^2] - E[x]^2 in float32.
 *
 * Every per-channel sum is compensated: the backward's sum(dy * (x - mean)) is a
 * difference of large terms that nearly cancel when the loss is almost invariant to the
 * channel's scale (a BN -> ReLU -> depthwise conv -> BN chain: only eps breaks the
 * invariance), and a plain float32 running sum over n*h*w terms then loses most of the
 * gamma gradient's digits. That sum and the variance's are Kahan sums term by term (4
 * FPU additions per term); the sums of x and of dy add their terms pairwise in blocks
 * of 8 (3 roundings deep) into a Kahan sum of the blocks (1.5 additions per term).
 * Pairwise blocks for the variance and the dot product too doubled kws_dscnn's error
 * against float64 on its near-zero gamma gradients (1.8e-5 -> 3.4e-5 relative to the
 * floor of runtime.run.grad_diffs), so those two keep Kahan. No double arithmetic
 * (soft-float on an M4). The normalization is y = x * a + b with per-channel
 * a = gamma * invstd and b = beta - mean * a (PyTorch's CPU form): 2 FPU operations. */
#include <math.h>

#include "poet_kernels.h"

#if defined(__GNUC__) && !defined(__clang__) /* clang unrolls these itself, and warns where it cannot */
#define UNROLL _Pragma("GCC unroll 8")
#else
#define UNROLL
#endif

/* A compensated running sum: s.sum + s.carry is the exact sum to about one ulp. */
typedef struct ksum {
    float sum, carry;
} ksum;

static inline void kadd(ksum *s, float v)
{
    const float y = v - s->carry;
    const float t = s->sum + y;
    s->carry = (t - s->sum) - y;
    s->sum = t;
}

static inline float pair8(const float *t)
{
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

/* s += x[0..n), blocks of 8 pairwise. */
static void ksum_run(ksum *s, const float *x, int32_t n)
{
    int32_t k = 0;
    for (; k + 8 <= n; k += 8) kadd(s, pair8(x + k));
    for (; k < n; k++) kadd(s, x[k]);
}

/* s += sum (x - mean)^2 over x[0..n), term by term. */
static void ksum_sq_run(ksum *s, const float *x, float mean, int32_t n)
{
    int32_t k = 0;
    for (; k < n; k++) {
        const float d = x[k] - mean;
        kadd(s, d * d);
    }
}

/* sdy += sum dy (blocks of 8 pairwise), sdot += sum dy * (x - mean) (term by term). */
static void ksum_bwd_run(ksum *sdy, ksum *sdot, const float *dy, const float *x, float mean, int32_t n)
{
    int32_t k = 0;
    for (; k + 8 <= n; k += 8) {
        float t[8];
        UNROLL
        for (int q = 0; q < 8; q++) t[q] = dy[k + q] * (x[k + q] - mean);
        kadd(sdy, pair8(dy + k));
        UNROLL
        for (int q = 0; q < 8; q++) kadd(sdot, t[q]);
    }
    for (; k < n; k++) {
        kadd(sdy, dy[k]);
        kadd(sdot, dy[k] * (x[k] - mean));
    }
}

void poet_batchnorm_fwd_train(const poet_bn_shape *s, const float *x, const float *gamma, const float *beta,
                              float *y, float *save_mean, float *save_invstd,
                              const float *run_mean, const float *run_var, float *new_mean, float *new_var)
{
    const int32_t m = s->n * s->hw;
    for (int32_t c = 0; c < s->c; c++) {
        ksum sum = {0.0f, 0.0f};
        for (int32_t n = 0; n < s->n; n++) ksum_run(&sum, x + (n * s->c + c) * s->hw, s->hw);
        const float mean = sum.sum / (float)m;
        ksum sqs = {0.0f, 0.0f};
        for (int32_t n = 0; n < s->n; n++) ksum_sq_run(&sqs, x + (n * s->c + c) * s->hw, mean, s->hw);
        const float sq = sqs.sum;
        const float var = sq / (float)m; /* biased: what normalizes the batch */
        const float invstd = 1.0f / sqrtf(var + s->eps);
        const float g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
        const float a = invstd * g, shift = b - mean * a;
        for (int32_t n = 0; n < s->n; n++) {
            const float *xc = x + (n * s->c + c) * s->hw;
            float *yc = y + (n * s->c + c) * s->hw;
            int32_t k = 0;
            for (; k + 4 <= s->hw; k += 4) {
                yc[k] = xc[k] * a + shift;
                yc[k + 1] = xc[k + 1] * a + shift;
                yc[k + 2] = xc[k + 2] * a + shift;
                yc[k + 3] = xc[k + 3] * a + shift;
            }
            for (; k < s->hw; k++) yc[k] = xc[k] * a + shift;
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
            const int32_t off = (n * s->c + c) * s->hw;
            ksum_bwd_run(&sdy, &sdot, dy + off, x + off, mean, s->hw);
        }
        const float sum_dy = sdy.sum, dot = sdot.sum;
        if (dgamma) dgamma[c] = dot * invstd;
        if (dbeta) dbeta[c] = sum_dy;
        if (dx) {
            /* dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * gamma * invstd */
            const float g = gamma ? gamma[c] : 1.0f;
            const float mean_dy = sum_dy / (float)m;
            const float proj = dot * invstd * invstd / (float)m;
            const float scale = invstd * g;
            for (int32_t n = 0; n < s->n; n++) {
                const int32_t off = (n * s->c + c) * s->hw;
                const float *xc = x + off, *dyc = dy + off;
                float *dxc = dx + off;
                int32_t k = 0;
                for (; k + 2 <= s->hw; k += 2) {
                    dxc[k] = (dyc[k] - mean_dy - (xc[k] - mean) * proj) * scale;
                    dxc[k + 1] = (dyc[k + 1] - mean_dy - (xc[k + 1] - mean) * proj) * scale;
                }
                for (; k < s->hw; k++) dxc[k] = (dyc[k] - mean_dy - (xc[k] - mean) * proj) * scale;
            }
        }
    }
}
