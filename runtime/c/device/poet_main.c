/*
 * poet_main.c - run one training step of a poetc-generated model by following its
 * schedule, on the host or on a Cortex-M.
 *
 *   1. read the batch (input.bin: the model's inputs, then the target) into the
 *      generated input arrays;
 *   2. poet_open() the schedule bytecode over the static arena of exactly the planned
 *      size (MODEL_ARENA_BYTES) and validate it completely;
 *   3. poet_run(): COMPUTE calls the node's generated kernel function, PAGE_OUT/PAGE_IN
 *      write/read the node's slot of the page file (pages.bin, the SD card), FENCE is a
 *      no-op because the transfers are synchronous;
 *   4. write outputs.bin (loss, gradients, buffer updates, in model_outputs order) and
 *      profile.bin (per node: timer ticks of its first COMPUTE, COMPUTE count; then the
 *      step's total ticks as 64 bits), and print one summary line.
 *
 * Exit code 0 on success; 1 with a line saying what failed otherwise.
 */
#include "model.h"
#include "poet_platform.h"
#include "poet_runtime.h"
#include "poet_text.h"

typedef struct step_ctx {
    int store;              /* page file handle */
    uint32_t paged_out;     /* bytes written to the page file */
    uint32_t paged_in;      /* bytes read back */
    uint32_t computes;      /* COMPUTE instructions run */
    uint32_t last;          /* timer at the previous callback */
    uint64_t ticks;         /* step time so far (64-bit: the 32-bit timer wraps) */
} step_ctx;

static uint32_t node_ticks[MODEL_N_NODES]; /* ticks of each node's first COMPUTE */
static uint32_t node_runs[MODEL_N_NODES];  /* COMPUTEs per node (recomputations included) */
static poet_prog prog;

/* Advance the step clock to now and return now. Every callback calls it, so no gap
 * between two readings can exceed the timer's 32-bit range. */
static uint32_t tick(step_ctx *c)
{
    uint32_t now = plat_ticks();
    c->ticks += (uint32_t)(now - c->last);
    c->last = now;
    return now;
}

static int cb_compute(void *user, uint32_t node, uint8_t *arena, const poet_where_t *where)
{
    step_ctx *c = (step_ctx *)user;
    if (POET_WHERE_OFFSET(where[node]) & 3u) return 1; /* kernels read float32: 4-byte alignment */
    uint32_t t0 = tick(c);
    model_nodes[node](arena, where);
    uint32_t t1 = tick(c);
    if (node_runs[node]++ == 0u) node_ticks[node] = t1 - t0;
    c->computes++;
    return 0;
}

static int cb_page_out(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    step_ctx *c = (step_ctx *)user;
    tick(c);
    if (model_flash_slot[node] == POET_NO_SLOT) return 1;
    if (plat_seek(c->store, model_flash_slot[node]) || plat_write(c->store, arena + offset, bytes)) return 1;
    c->paged_out += bytes;
    tick(c);
    return 0;
}

static int cb_page_in(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    step_ctx *c = (step_ctx *)user;
    tick(c);
    if (model_flash_slot[node] == POET_NO_SLOT) return 1;
    if (plat_seek(c->store, model_flash_slot[node]) || plat_read(c->store, arena + offset, bytes)) return 1;
    c->paged_in += bytes;
    tick(c);
    return 0;
}

static int cb_fence(void *user)
{
    tick((step_ctx *)user); /* transfers are synchronous: complete when their callback returns */
    return 0;
}

static int fail(const char *what, int rc)
{
    char line[96], *p = put_s(line, "poet-step: FAILED ");
    p = put_s(p, what);
    p = put_s(p, " rc=");
    p = put_i(p, rc);
    p = put_s(p, " ");
    p = put_s(p, poet_strerror(rc));
    *p = '\0';
    plat_puts(line);
    return 1;
}

static int write_file(const char *name, const model_io *ios, uint32_t n)
{
    int h = plat_open(name, PLAT_WRITE);
    if (h < 0) return 1;
    for (uint32_t k = 0; k < n; k++)
        if (plat_write(h, ios[k].data, ios[k].bytes)) return 1;
    plat_close(h);
    return 0;
}

int main(void)
{
    plat_init();
    int h = plat_open("input.bin", PLAT_READ);
    if (h < 0) return fail("open input.bin", 0);
    for (uint32_t k = 0; k < MODEL_N_INPUTS; k++)
        if (plat_read(h, model_inputs[k].data, model_inputs[k].bytes)) return fail("read input.bin", (int)k);
    plat_close(h);

    int rc = poet_open(&prog, model_schedule, model_schedule_len, model_arena, sizeof model_arena, model_where,
                       MODEL_N_NODES);
    if (rc != POET_OK) return fail("poet_open", rc);
    step_ctx ctx = {0, 0u, 0u, 0u, 0u, 0u};
    ctx.store = plat_open("pages.bin", PLAT_READ_WRITE);
    if (ctx.store < 0) return fail("open pages.bin", 0);
    const poet_callbacks cb = {cb_compute, cb_page_out, cb_page_in, 0, cb_fence, 0}; /* MOVE: the runtime copies */

    model_prelude();
    ctx.last = plat_ticks();
    rc = poet_run(&prog, &cb, &ctx);
    tick(&ctx);
    if (rc != POET_OK) return fail("poet_run", rc);
    plat_close(ctx.store);

    if (write_file("outputs.bin", model_outputs, MODEL_N_OUTPUTS)) return fail("write outputs.bin", 0);
    const model_io prof[3] = {{"node_ticks", node_ticks, sizeof node_ticks},
                              {"node_runs", node_runs, sizeof node_runs},
                              {"step_ticks", &ctx.ticks, sizeof ctx.ticks}};
    if (write_file("profile.bin", prof, 3u)) return fail("write profile.bin", 0);

    char line[256], *p = put_s(line, "poet-step: ok model=");
    p = put_s(p, MODEL_NAME);
    p = put_s(p, " arena=");
    p = put_u(p, sizeof model_arena);
    p = put_s(p, " planned=");
    p = put_u(p, poet_arena_bytes(&prog));
    p = put_s(p, " paged_out=");
    p = put_u(p, ctx.paged_out);
    p = put_s(p, " paged_in=");
    p = put_u(p, ctx.paged_in);
    p = put_s(p, " computes=");
    p = put_u(p, ctx.computes);
    p = put_s(p, " ticks=");
    p = put_u(p, ctx.ticks);
    p = put_s(p, " stack=");
    p = put_u(p, plat_stack_used());
    *p = '\0';
    plat_puts(line);
    return 0;
}
