/* s8_cases.c - runs int8 kernel cases from a byte stream: the same cases, encoded once by
 * poet_compiler/quant/ckernels.py, run through the host shared library (portable C) and
 * on the emulated Cortex-M4 (DSP) and Cortex-M3 (no DSP) firmware, whose results are
 * compared with the host reference bit for bit; under qemu -icount the ticks around each
 * kernel call count its instructions (bench/device_icount_int8.py).
 *
 * A case: int32 words [kernel, n_params, params..., n_buffers, then per buffer: flags,
 * bytes, and the bytes (padded to 4) when flags has IN]. Buffers are laid out 8-byte
 * aligned in the caller's arena; an output-only buffer is first filled with 0xA5, so an
 * element the kernel leaves unwritten shows. The kernel's workspace is allocated at the
 * bytes its _ws function returns, followed by guard bytes that must survive.
 * A result: [status, return value, workspace bytes, ticks], then every OUT buffer. */
#include <stdint.h>
#include <string.h>

#include "poet_kernels_s8.h"
#ifdef S8_CASES_FLOAT /* the float32 convolutions beside, for bench/device_icount_int8.py */
#include "poet_kernels.h"
#endif

enum { BUF_IN = 1, BUF_OUT = 2, BUF_NULL = 4 };
enum { OK = 0, GUARD = 1, UNKNOWN = 2, ARENA = 3, FORMAT = 4 };
enum {
    K_CONV_FWD = 1, K_CONV_BWD_INPUT, K_CONV_BWD_WEIGHT, K_MAXPOOL_FWD, K_MAXPOOL_BWD, K_AVGPOOL_FWD,
    K_AVGPOOL_BWD, K_ADD_FWD, K_CLAMP, K_ACT_BWD, K_GRAD_SUM, K_SOFTMAX_CE, K_UPDATE_BIAS, K_UPDATE_WEIGHT,
    K_NEXT_ACT_EXP, K_NEXT_GRAD_EXP, K_RESCALE_BIAS, K_LOG2Q,
    K_F32_CONV_FWD = 100, K_F32_CONV_BWD_INPUT, K_F32_CONV_BWD_WEIGHT
};
#define MAX_BUFS 12
#define GUARD_BYTES 64
#define GUARD_BYTE 0x5Au

typedef struct arena {
    uint8_t *p;
    int32_t used, size;
} arena;

static void *take(arena *a, int32_t bytes)
{
    int32_t at = (a->used + 7) & ~7;
    if (bytes < 0 || at + bytes > a->size)
        return 0;
    a->used = at + bytes;
    return a->p + at;
}

static void conv_shape(const int32_t *p, poet_s8_conv_shape *s)
{
    *s = (poet_s8_conv_shape){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13]};
}

static void pool_shape(const int32_t *p, poet_s8_pool_shape *s)
{
    *s = (poet_s8_pool_shape){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

/* The kernel's workspace bytes (before it runs). */
static int32_t workspace_bytes(int32_t kernel, const int32_t *p)
{
    poet_s8_conv_shape s;
    switch (kernel) {
    case K_CONV_FWD: conv_shape(p, &s); return poet_s8_conv_fwd_ws(&s);
    case K_CONV_BWD_INPUT: conv_shape(p, &s); return poet_s8_conv_bwd_input_ws(&s);
    case K_CONV_BWD_WEIGHT: conv_shape(p, &s); return poet_s8_conv_bwd_weight_ws(&s);
    case K_SOFTMAX_CE: return poet_s8_softmax_ce_ws(p[0], p[1]);
    default: return 0;
    }
}

typedef uint32_t (*ticks_fn)(void);

static int32_t call(int32_t kernel, const int32_t *p, void **b, void *ws, int32_t *ret)
{
    poet_s8_conv_shape cs;
    poet_s8_pool_shape ps;
    switch (kernel) {
    case K_CONV_FWD: {
        conv_shape(p, &cs);
        poet_s8_requant q = {p[14], p[15], p[16], p[17], (const int32_t *)b[3], (const int32_t *)b[4]};
        poet_s8_conv_fwd(&cs, &q, b[0], b[1], b[2], b[5], b[6], ws);
        return OK;
    }
    case K_CONV_BWD_INPUT: {
        conv_shape(p, &cs);
        poet_s8_grad_requant q = {(const int16_t *)b[2], p[14], p[15]};
        poet_s8_conv_bwd_input(&cs, &q, b[0], b[1], b[3], b[4], ws);
        return OK;
    }
    case K_CONV_BWD_WEIGHT:
        conv_shape(p, &cs);
        poet_s8_conv_bwd_weight(&cs, b[0], b[1], p[14], p[15], p[16], b[2], b[3], ws);
        return OK;
    case K_MAXPOOL_FWD: pool_shape(p, &ps); poet_s8_maxpool_fwd(&ps, b[0], b[1]); return OK;
    case K_MAXPOOL_BWD: pool_shape(p, &ps); poet_s8_maxpool_bwd(&ps, b[0], b[1], b[2]); return OK;
    case K_AVGPOOL_FWD:
        pool_shape(p, &ps);
        poet_s8_avgpool_fwd(&ps, p[12], p[13], p[14], p[15], b[0], b[1], b[2]);
        return OK;
    case K_AVGPOOL_BWD:
        pool_shape(p, &ps);
        *ret = poet_s8_avgpool_grad_shift(&ps);
        poet_s8_avgpool_bwd(&ps, b[0], b[1]);
        return OK;
    case K_ADD_FWD: {
        poet_s8_add_quant q = {p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
        poet_s8_add_fwd(p[0], &q, b[0], b[1], b[2], b[3]);
        return OK;
    }
    case K_CLAMP: poet_s8_clamp(p[0], b[0], p[1], p[2], b[1]); return OK;
    case K_ACT_BWD: {
        poet_s8_act_mask m = {p[1], p[2], p[3]};
        poet_s8_act_bwd(p[0], &m, b[0], b[1], b[2]);
        return OK;
    }
    case K_GRAD_SUM: *ret = poet_s8_grad_sum(p[0], b[0], p[1], b[1], p[2], b[2]); return OK;
    case K_SOFTMAX_CE: *ret = poet_s8_softmax_ce(p[0], p[1], b[0], b[1], p[2], p[3], b[2], b[3], ws); return OK;
    case K_UPDATE_BIAS: {
        poet_s8_update u = {(const int32_t *)b[0], (const int32_t *)b[1], p[2], p[3], p[4]};
        poet_s8_update_bias(&u, p[0], p[1], b[2], b[3], b[4], b[5]);
        return OK;
    }
    case K_UPDATE_WEIGHT: {
        poet_s8_update u = {(const int32_t *)b[0], (const int32_t *)b[1], p[3], p[4], p[5]};
        *ret = poet_s8_update_weight(&u, p[0], p[1], p[2], b[2], b[3], b[4], b[5], b[6], b[7], b[8]);
        return OK;
    }
    case K_NEXT_ACT_EXP: {
        int32_t r[2] = {p[1], p[2]};
        *ret = poet_s8_next_act_exponent(p[0], r, p[3], p[4]);
        return OK;
    }
    case K_NEXT_GRAD_EXP: *ret = poet_s8_next_grad_exponent(p[0], (uint32_t)p[1]); return OK;
    case K_RESCALE_BIAS: poet_s8_rescale_bias(p[0], b[0], p[1]); return OK;
    case K_LOG2Q: *ret = poet_s8_log2q((uint32_t)p[0]); return OK;
#ifdef S8_CASES_FLOAT
    case K_F32_CONV_FWD:
    case K_F32_CONV_BWD_INPUT:
    case K_F32_CONV_BWD_WEIGHT: {
        poet_conv2d_shape f = {p[0], p[1], p[2],  p[3],  p[4],  p[5],  p[6],  p[7],
                               p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]};
        if (kernel == K_F32_CONV_FWD)
            poet_conv2d_fwd(&f, b[0], b[1], b[2], b[3]);
        else if (kernel == K_F32_CONV_BWD_INPUT)
            poet_conv2d_bwd_input(&f, b[0], b[1], b[2]);
        else
            poet_conv2d_bwd_weight(&f, b[0], b[1], b[2]);
        return OK;
    }
#endif
    default: return UNKNOWN;
    }
}

static int32_t word(const uint8_t *in, int32_t len, int32_t *pos, int32_t *ok)
{
    int32_t v = 0;
    if (*pos + 4 > len) {
        *ok = 0;
        return 0;
    }
    memcpy(&v, in + *pos, 4);
    *pos += 4;
    return v;
}

/* Runs one case at in[*pos], appends its result to out; 0 when out is too small. */
static int32_t run_one(const uint8_t *in, int32_t len, int32_t *pos, uint8_t *out, int32_t cap, int32_t *done,
                       arena *mem, ticks_fn ticks)
{
    int32_t ok = 1, head[4] = {OK, 0, 0, 0};
    int32_t kernel = word(in, len, pos, &ok), np = word(in, len, pos, &ok);
    if (!ok || np < 0 || *pos + 4 * np > len)
        return 0;
    const int32_t *params = (const int32_t *)(const void *)(in + *pos); /* the caller aligns the stream */
    *pos += 4 * np;
    int32_t nb = word(in, len, pos, &ok), flags[MAX_BUFS], bytes[MAX_BUFS];
    void *buf[MAX_BUFS];
    if (!ok || nb < 0 || nb > MAX_BUFS)
        return 0;
    mem->used = 0;
    for (int32_t i = 0; i < nb; i++) {
        flags[i] = word(in, len, pos, &ok);
        bytes[i] = word(in, len, pos, &ok);
        buf[i] = (flags[i] & BUF_NULL) ? 0 : take(mem, bytes[i]);
        if (!ok || (!buf[i] && !(flags[i] & BUF_NULL)))
            head[0] = ARENA;
        if (flags[i] & BUF_IN) {
            if (*pos + bytes[i] > len)
                return 0;
            if (buf[i]) memcpy(buf[i], in + *pos, (size_t)bytes[i]);
            *pos += (bytes[i] + 3) & ~3;
        } else if (buf[i]) {
            memset(buf[i], 0xA5, (size_t)bytes[i]);
        }
    }
    head[2] = workspace_bytes(kernel, params);
    uint8_t *ws = take(mem, head[2] + GUARD_BYTES);
    if (!ws)
        head[0] = ARENA;
    if (head[0] == OK) {
        memset(ws, 0xA5, (size_t)head[2]);
        memset(ws + head[2], GUARD_BYTE, GUARD_BYTES);
        uint32_t t0 = ticks ? ticks() : 0u;
        head[0] = call(kernel, params, buf, ws, &head[1]);
        head[3] = (int32_t)((ticks ? ticks() : 0u) - t0);
        for (int32_t g = 0; g < GUARD_BYTES; g++)
            if (ws[head[2] + g] != GUARD_BYTE) head[0] = GUARD;
    }
    int32_t need = 16;
    for (int32_t i = 0; i < nb; i++)
        if ((flags[i] & BUF_OUT) && buf[i]) need += (bytes[i] + 3) & ~3;
    if (*done + need > cap)
        return 0;
    memcpy(out + *done, head, 16);
    *done += 16;
    for (int32_t i = 0; i < nb; i++)
        if ((flags[i] & BUF_OUT) && buf[i]) {
            memset(out + *done, 0, (size_t)((bytes[i] + 3) & ~3));
            memcpy(out + *done, buf[i], (size_t)bytes[i]);
            *done += (bytes[i] + 3) & ~3;
        }
    return 1;
}

/* Runs every case of in[0, len); returns the bytes of results written to out, or -1. */
int32_t s8_run_cases(const uint8_t *in, int32_t len, uint8_t *out, int32_t cap, uint8_t *mem, int32_t mem_size,
                     ticks_fn ticks)
{
    arena a = {mem, 0, mem_size};
    int32_t pos = 0, done = 0;
    while (pos < len)
        if (!run_one(in, len, &pos, out, cap, &done, &a, ticks))
            return -1;
    return done;
}

#ifdef S8_CASES_MAIN
/* The firmware: cases.bin ("S8CS", uint32 length, the stream) in, results.bin out. */
#include "poet_platform.h"
#include "poet_text.h"

#ifndef S8_CASES_BYTES
#define S8_CASES_BYTES (1024 * 1024)
#endif
static uint8_t cases_in[S8_CASES_BYTES] __attribute__((aligned(8)));
static uint8_t results[S8_CASES_BYTES] __attribute__((aligned(8)));
static uint8_t memory[S8_CASES_BYTES] __attribute__((aligned(8)));

int main(void)
{
    plat_init();
    uint32_t head[2] = {0, 0};
    int h = plat_open("cases.bin", PLAT_READ);
    if (h < 0 || plat_read(h, head, 8) || head[0] != 0x53433853u || head[1] > S8_CASES_BYTES ||
        plat_read(h, cases_in, head[1])) {
        plat_puts("s8-cases: cannot read cases.bin");
        return 1;
    }
    plat_close(h);
    int32_t n = s8_run_cases(cases_in, (int32_t)head[1], results, S8_CASES_BYTES, memory, S8_CASES_BYTES, plat_ticks);
    if (n < 0) {
        plat_puts("s8-cases: bad case stream");
        return 1;
    }
    int o = plat_open("results.bin", PLAT_WRITE);
    if (o < 0 || plat_write(o, results, (uint32_t)n)) {
        plat_puts("s8-cases: cannot write results.bin");
        return 1;
    }
    plat_close(o);
    char line[96], *p = put_s(line, "s8-cases: ok bytes=");
    p = put_u(p, (uint32_t)n);
    p = put_s(p, " stack=");
    p = put_u(p, plat_stack_used());
    *p = '\0';
    plat_puts(line);
    return 0;
}
#endif
