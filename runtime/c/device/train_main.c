/*
 * train_main.c - train a poetc-generated model on the device: E epochs over a data set
 * file, batch by batch, each step following the schedule, then held-out accuracy.
 *
 *   1. parameters: the values compiled into the firmware, or params.bin when the file
 *      exists (every parameter in train_params order, float32: a pretrained model);
 *   2. held-out accuracy before training (test.bin);
 *   3. for each epoch, for each full batch of train.bin (in file order, the last partial
 *      batch dropped): read the batch, poet_run the schedule (COMPUTE -> the node's
 *      kernel, PAGE_OUT/PAGE_IN -> the node's slot of pages.bin), then apply what the
 *      schedule did not: with TRAIN_UPDATE_IN_SCHEDULE 0 the graph hands its gradients
 *      out and the driver applies SGD (TRAIN_LR, TRAIN_MOMENTUM) to every trained
 *      parameter; with 1 the schedule's update nodes have already written them. Buffer
 *      updates (BatchNorm running statistics) are copied back. The step's loss is
 *      appended to losses.bin (float32) and printed every TRAIN_LOG_EVERY steps;
 *   4. held-out accuracy after training, params_out.bin (every parameter, float32), and
 *      one summary line.
 *
 * Accuracy runs the same schedule only up to the COMPUTE of the logits node
 * (TRAIN_LOGITS_NODE), takes the argmax of every row, and rewinds: no backward pass, no
 * update. A data set file is a 16-byte header ("PDS1", then uint32 n, input bytes per
 * sample, label bytes per sample, little endian), n inputs, then n labels (int32).
 *
 * Exit code 0 on success; 1 with a line saying what failed otherwise.
 */
#include "model.h"
#include "model_train.h"
#include "poet_platform.h"
#include "poet_runtime.h"
#include "poet_text.h"

typedef struct loop_ctx {
    int store;          /* page file handle */
    uint64_t paged_out; /* bytes written to the page file */
    uint64_t paged_in;  /* bytes read back */
    uint64_t computes;  /* COMPUTE instructions run */
    uint32_t last;      /* timer at the previous reading */
    uint64_t ticks;     /* time so far (64-bit: the 32-bit timer wraps) */
} loop_ctx;

typedef struct dataset {
    int h;
    uint32_t n;
} dataset;

static poet_prog prog;

static void tick(loop_ctx *c)
{
    uint32_t now = plat_ticks();
    c->ticks += (uint32_t)(now - c->last);
    c->last = now;
}

static int cb_compute(void *user, uint32_t node, uint8_t *arena, const poet_where_t *where)
{
    loop_ctx *c = (loop_ctx *)user;
    if (POET_WHERE_OFFSET(where[node]) & 3u) return 1; /* kernels read float32: 4-byte alignment */
    model_nodes[node](arena, where);
    c->computes++;
    tick(c);
    return 0;
}

static int cb_page_out(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    loop_ctx *c = (loop_ctx *)user;
    if (model_flash_slot[node] == POET_NO_SLOT) return 1;
    if (plat_seek(c->store, model_flash_slot[node]) || plat_write(c->store, arena + offset, bytes)) return 1;
    c->paged_out += bytes;
    tick(c);
    return 0;
}

static int cb_page_in(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    loop_ctx *c = (loop_ctx *)user;
    if (model_flash_slot[node] == POET_NO_SLOT) return 1;
    if (plat_seek(c->store, model_flash_slot[node]) || plat_read(c->store, arena + offset, bytes)) return 1;
    c->paged_in += bytes;
    tick(c);
    return 0;
}

static int cb_fence(void *user)
{
    tick((loop_ctx *)user); /* transfers are synchronous: complete when their callback returns */
    return 0;
}

static const poet_callbacks callbacks = {cb_compute, cb_page_out, cb_page_in, 0, cb_fence, 0};

static int fail(const char *what, int rc)
{
    char line[120], *p = put_s(line, "poet-train: FAILED ");
    p = put_s(p, what);
    p = put_s(p, " rc=");
    p = put_i(p, rc);
    p = put_s(p, " ");
    p = put_s(p, poet_strerror(rc));
    *p = '\0';
    plat_puts(line);
    return 1;
}

#define SAMPLE_BYTES (MODEL_INPUT_BYTES / TRAIN_BATCH)
#define LABEL_BYTES (MODEL_TARGET_BYTES / TRAIN_BATCH)

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* 0 when the file is a data set of samples of this model's shape. */
static int open_dataset(const char *name, dataset *d)
{
    uint8_t head[16];
    d->h = plat_open(name, PLAT_READ);
    if (d->h < 0 || plat_read(d->h, head, sizeof head)) return 1;
    if (head[0] != 'P' || head[1] != 'D' || head[2] != 'S' || head[3] != '1') return 1;
    d->n = le32(head + 4);
    return le32(head + 8) != SAMPLE_BYTES || le32(head + 12) != LABEL_BYTES || d->n == 0u;
}

/* Samples first .. first+count-1 into the batch arrays; rows past count are zero. */
static int read_batch(const dataset *d, uint32_t first, uint32_t count)
{
    uint8_t *x = (uint8_t *)model_inputs[0].data, *y = (uint8_t *)model_inputs[1].data;
    if (plat_seek(d->h, 16u + first * SAMPLE_BYTES) || plat_read(d->h, x, count * SAMPLE_BYTES)) return 1;
    if (plat_seek(d->h, 16u + d->n * SAMPLE_BYTES + first * LABEL_BYTES) || plat_read(d->h, y, count * LABEL_BYTES))
        return 1;
    for (uint32_t k = count * SAMPLE_BYTES; k < MODEL_INPUT_BYTES; k++) x[k] = 0u;
    for (uint32_t k = count * LABEL_BYTES; k < MODEL_TARGET_BYTES; k++) y[k] = 0u;
    return 0;
}

/* Correct predictions over the whole file, forward only; -1 on failure. */
static int32_t evaluate(const char *name, loop_ctx *ctx, uint32_t *total)
{
    dataset d;
    if (open_dataset(name, &d)) return -1;
    int32_t correct = 0;
    for (uint32_t first = 0; first < d.n; first += TRAIN_BATCH) {
        uint32_t count = d.n - first < TRAIN_BATCH ? d.n - first : TRAIN_BATCH;
        if (read_batch(&d, first, count)) return -1;
        model_prelude();
        poet_reset(&prog);
        poet_instr ins;
        int rc;
        do {
            rc = poet_step(&prog, &callbacks, ctx, &ins);
        } while (rc == POET_OK && !(ins.op == POET_OP_COMPUTE && ins.node == TRAIN_LOGITS_NODE));
        if (rc != POET_OK) return -1;
        const float *logits = train_logits(model_arena, model_where);
        const int32_t *labels = (const int32_t *)model_inputs[1].data;
        for (uint32_t r = 0; r < count; r++) {
            uint32_t best = 0;
            for (uint32_t k = 1; k < TRAIN_CLASSES; k++)
                if (logits[r * TRAIN_CLASSES + k] > logits[r * TRAIN_CLASSES + best]) best = k;
            correct += (int32_t)best == labels[r];
        }
    }
    plat_close(d.h);
    *total = d.n;
    return correct;
}

/* torch.optim.SGD without weight decay: buf = momentum * buf + g (buf = g at the first
 * step), p -= lr * buf; plain p -= lr * g without momentum. */
static void apply_update(uint32_t step)
{
#if !TRAIN_UPDATE_IN_SCHEDULE
    for (uint32_t k = 0; k < TRAIN_N_PARAMS; k++) {
        const train_param *t = &train_params[k];
        if (!t->grad) continue; /* frozen */
        if (!t->momentum) {
            for (uint32_t i = 0; i < t->count; i++) t->value[i] -= TRAIN_LR * t->grad[i];
            continue;
        }
        for (uint32_t i = 0; i < t->count; i++) {
            t->momentum[i] = step ? TRAIN_MOMENTUM * t->momentum[i] + t->grad[i] : t->grad[i];
            t->value[i] -= TRAIN_LR * t->momentum[i];
        }
    }
#else
    (void)step;
#endif
#if TRAIN_N_BUFFER_UPDATES > 0
    for (uint32_t k = 0; k < TRAIN_N_BUFFER_UPDATES; k++) {
        uint8_t *dst = (uint8_t *)train_buffer_updates[k].dst;
        const uint8_t *src = (const uint8_t *)train_buffer_updates[k].src;
        for (uint32_t i = 0; i < train_buffer_updates[k].bytes; i++) dst[i] = src[i];
    }
#endif
}

static int params_file(const char *name, int mode)
{
    int h = plat_open(name, mode);
    if (h < 0) return mode == PLAT_READ ? 0 : 1; /* no params.bin: keep the compiled-in values */
    for (uint32_t k = 0; k < TRAIN_N_PARAMS; k++) {
        const train_param *t = &train_params[k];
        if (mode == PLAT_READ ? plat_read(h, t->value, t->count * 4u) : plat_write(h, t->value, t->count * 4u))
            return 1;
    }
    plat_close(h);
    return 0;
}

static char *put_kv(char *p, const char *key, uint64_t v)
{
    p = put_s(p, key);
    return put_u(p, v);
}

int main(void)
{
    plat_init();
    if (params_file("params.bin", PLAT_READ)) return fail("read params.bin", 0);
    int rc = poet_open(&prog, model_schedule, model_schedule_len, model_arena, sizeof model_arena, model_where,
                       MODEL_N_NODES);
    if (rc != POET_OK) return fail("poet_open", rc);
    loop_ctx ctx = {0, 0u, 0u, 0u, 0u, 0u};
    ctx.store = plat_open("pages.bin", PLAT_READ_WRITE);
    if (ctx.store < 0) return fail("open pages.bin", 0);
    ctx.last = plat_ticks();

    uint32_t total = 0;
    int32_t before = evaluate("test.bin", &ctx, &total);
    if (before < 0) return fail("accuracy on test.bin", 0);
    uint64_t eval_ticks = ctx.ticks;

    dataset train;
    if (open_dataset("train.bin", &train)) return fail("open train.bin", 0);
    int losses = plat_open("losses.bin", PLAT_WRITE);
    if (losses < 0) return fail("open losses.bin", 0);
    loop_ctx first = ctx;
    uint32_t steps = 0;
    uint64_t train_start = ctx.ticks;
    for (uint32_t epoch = 0; epoch < TRAIN_EPOCHS; epoch++) {
        for (uint32_t b = 0; b + 1u <= train.n / TRAIN_BATCH; b++) {
            if (read_batch(&train, b * TRAIN_BATCH, TRAIN_BATCH)) return fail("read train.bin", (int)b);
            model_prelude();
            poet_reset(&prog);
            rc = poet_run(&prog, &callbacks, &ctx);
            if (rc != POET_OK) return fail("poet_run", rc);
            apply_update(steps);
            tick(&ctx);
            if (steps == 0u) {
                first.paged_out = ctx.paged_out - first.paged_out;
                first.paged_in = ctx.paged_in - first.paged_in;
                first.computes = ctx.computes - first.computes;
                first.ticks = ctx.ticks - first.ticks;
            }
            const float loss = *(const float *)model_outputs[0].data;
            if (plat_write(losses, &loss, 4u)) return fail("write losses.bin", 0);
            steps++;
            if (steps % TRAIN_LOG_EVERY == 0u) {
                char line[96], *p = put_kv(line, "poet-train: epoch=", epoch);
                p = put_kv(p, " step=", steps);
                p = put_s(p, " loss=");
                p = put_f6(p, loss);
                *p = '\0';
                plat_puts(line);
            }
        }
    }
    uint64_t train_ticks = ctx.ticks - train_start;
    plat_close(losses);
    plat_close(train.h);

    uint64_t eval_start = ctx.ticks;
    int32_t after = evaluate("test.bin", &ctx, &total);
    if (after < 0) return fail("accuracy on test.bin", 0);
    eval_ticks += ctx.ticks - eval_start;
    plat_close(ctx.store);
    if (params_file("params_out.bin", PLAT_WRITE)) return fail("write params_out.bin", 0);

    char line[320], *p = put_s(line, "poet-train: ok model=");
    p = put_s(p, MODEL_NAME);
    p = put_kv(p, " steps=", steps);
    p = put_kv(p, " correct_before=", (uint64_t)before);
    p = put_kv(p, " correct=", (uint64_t)after);
    p = put_kv(p, " total=", total);
    p = put_kv(p, " arena=", sizeof model_arena);
    p = put_kv(p, " planned=", poet_arena_bytes(&prog));
    p = put_kv(p, " step_paged_out=", first.paged_out);
    p = put_kv(p, " step_paged_in=", first.paged_in);
    p = put_kv(p, " step_computes=", first.computes);
    p = put_kv(p, " step_ticks=", first.ticks);
    p = put_kv(p, " train_ticks=", train_ticks);
    p = put_kv(p, " eval_ticks=", eval_ticks);
    p = put_kv(p, " stack=", plat_stack_used());
    *p = '\0';
    plat_puts(line);
    return 0;
}
