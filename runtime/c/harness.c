/*
 * harness.c - host test harness for the POET runtime.
 *
 *   harness [-q] FILE.poet      run it, print the trace and figures
 *   harness -c [-a BYTES] FILE.poet...
 *                               only validate: print "<status> <file>" per file, offering
 *                               an arena of BYTES (default: the most this build can
 *                               address; never allocated, poet_open does not touch it);
 *                               POET_E_RESOURCES lines add " needs arena_bytes=N n_nodes=M"
 *
 * Loads FILE.poet, runs it through poet_open/poet_step with simulated kernels and a
 * simulated flash, and prints the instruction trace (one line per instruction, in the
 * same text as Python's str(Instruction)) followed by "# key value" summary lines.
 *
 * Simulated kernels: node k's output buffer is filled with a byte pattern derived from
 * a signature = hash(k, signatures of its inputs). Before a kernel runs, every input
 * listed in the node table must be resident, not an in-flight page-in, and its buffer
 * must still hold exactly the pattern of the signature the input had when it was first
 * computed - so a clobbered, stale or missing input is caught. Transfers behave like
 * DMA: a page-out copies arena -> flash at the next fence, a page-in flash -> arena at
 * the next fence. A MOVE (version 4) is copied by the runtime itself; the harness checks
 * that no transfer of the node is in flight, and the next consumer checks the bytes
 * arrived. Without a node table (stripped file) inputs cannot be checked.
 *
 * Exit status: 0 success, 1 a verification failed, 2 the file was refused or unreadable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poet_runtime.h"

typedef struct {
    uint32_t count;
    uint32_t *ids;
} inputs_t;

typedef struct {
    poet_prog *p;
    uint32_t n;
    inputs_t *inputs;        /* NULL when the file has no node table */
    uint32_t *sig;           /* signature at first computation */
    uint8_t *known;
    uint8_t *in_flight;      /* page-in issued, fence not yet reached */
    uint8_t *flash;          /* one slot per node */
    uint64_t *flash_at;
    uint32_t *pend_node;
    uint64_t *pend_off, *pend_len;
    uint8_t *pend_dir;       /* 0 out, 1 in */
    uint32_t n_pend;
    uint64_t live, peak_live, high_water, checked, flash_out, flash_in;
    int failed;
} sim_t;

static const char *const OPS[] = {"COMPUTE", "PAGE_OUT", "PAGE_IN", "FREE", "FENCE", "MOVE"};

static uint32_t mix(uint32_t h, uint32_t v)
{
    h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
    return h * 0x85EBCA6Bu;
}

static uint8_t pattern(uint32_t sig, uint32_t j) { return (uint8_t)((sig >> ((j & 3u) * 8u)) ^ (j * 131u >> 3)); }

static void fail(sim_t *s, const char *what, uint32_t a, uint32_t b)
{
    fprintf(stderr, "verify: instruction %u: %s (%u, %u)\n", (unsigned)poet_pc(s->p), what, (unsigned)a,
            (unsigned)b);
    s->failed = 1;
}

static int k_compute(void *user, uint32_t node, uint8_t *arena, const poet_where_t *where)
{
    sim_t *s = user;
    uint32_t h = mix(0x12345u, node), k, i;
    uint8_t *out = arena + POET_WHERE_OFFSET(where[node]);
    uint64_t end, j, bytes, work = poet_node_workspace(s->p, node);
    if (s->inputs) {
        for (k = 0; k < s->inputs[node].count; k++) {
            i = s->inputs[node].ids[k];
            if (!POET_WHERE_RESIDENT(where[i])) {
                fail(s, "input not in RAM (input, consumer)", i, node);
                continue;
            }
            if (s->in_flight[i]) {
                fail(s, "input still being paged in (input, consumer)", i, node);
                continue;
            }
            if (!s->known[i]) {
                fail(s, "input never computed (input, consumer)", i, node);
                continue;
            }
            bytes = poet_node_bytes(s->p, i);
            for (j = 0; j < bytes; j++)
                if (arena[POET_WHERE_OFFSET(where[i]) + j] != pattern(s->sig[i], (uint32_t)j)) {
                    fail(s, "input buffer clobbered (input, consumer)", i, node);
                    break;
                }
            s->checked++;
            h = mix(h, s->sig[i]);
        }
        if (s->known[node] && s->sig[node] != h)
            fail(s, "recomputation differs from first computation (node, 0)", node, 0);
    }
    if (!s->known[node]) {
        s->known[node] = 1;
        s->sig[node] = h;
    }
    bytes = poet_node_bytes(s->p, node);
    for (j = 0; j < bytes; j++)
        out[j] = pattern(s->sig[node], (uint32_t)j);
    /* The workspace follows the output: scribble on it, as a real kernel may. */
    memset(out + bytes, 0xA5, (size_t)work);
    s->live += bytes;
    if (s->live + work > s->peak_live)
        s->peak_live = s->live + work;
    end = (uint64_t)POET_WHERE_OFFSET(where[node]) + bytes + work;
    if (end > s->high_water)
        s->high_water = end;
    return 0;
}

static void pend(sim_t *s, uint32_t node, uint64_t off, uint64_t len, uint8_t dir)
{
    s->pend_node[s->n_pend] = node;
    s->pend_off[s->n_pend] = off;
    s->pend_len[s->n_pend] = len;
    s->pend_dir[s->n_pend] = dir;
    s->n_pend++;
}

static int k_page_out(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    (void)arena;
    pend(user, node, offset, bytes, 0);
    return 0;
}

static int k_page_in(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    sim_t *s = user;
    uint64_t end = (uint64_t)offset + bytes;
    (void)arena;
    s->in_flight[node] = 1;
    pend(s, node, offset, bytes, 1);
    s->live += bytes;
    if (s->live > s->peak_live)
        s->peak_live = s->live;
    if (end > s->high_water)
        s->high_water = end;
    return 0;
}

static int k_free(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    sim_t *s = user;
    uint32_t k;
    (void)arena;
    (void)offset;
    for (k = 0; k < s->n_pend; k++)
        if (s->pend_node[k] == node)
            fail(s, "free of a buffer with a transfer in flight (node, 0)", node, 0);
    s->live -= bytes;
    return 0;
}

static int k_move(void *user, uint32_t node, uint8_t *arena, poet_size_t from, poet_size_t to, poet_size_t bytes)
{
    sim_t *s = user;
    uint32_t k;
    uint64_t end = (uint64_t)to + bytes;
    (void)arena;
    (void)from;
    for (k = 0; k < s->n_pend; k++)
        if (s->pend_node[k] == node)
            fail(s, "move of a buffer with a transfer in flight (node, 0)", node, 0);
    if (end > s->high_water)
        s->high_water = end;
    return 0;
}

static int k_fence(void *user)
{
    sim_t *s = user;
    uint32_t k, node;
    for (k = 0; k < s->n_pend; k++) {
        node = s->pend_node[k];
        if (s->pend_dir[k] == 0) {
            memcpy(s->flash + s->flash_at[node], s->p->arena + s->pend_off[k], (size_t)s->pend_len[k]);
            s->flash_out += s->pend_len[k];
        } else {
            memcpy(s->p->arena + s->pend_off[k], s->flash + s->flash_at[node], (size_t)s->pend_len[k]);
            s->in_flight[node] = 0;
            s->flash_in += s->pend_len[k];
        }
    }
    s->n_pend = 0;
    return 0;
}

/* ---- node table (host only: the device runtime never reads it) --------------------- */
static int rd_var(const uint8_t *b, uint32_t len, uint32_t *pos, uint32_t *out)
{
    uint64_t v = 0;
    uint32_t shift;
    for (shift = 0; shift < 35u; shift += 7u) {
        if (*pos >= len)
            return -1;
        v |= (uint64_t)(b[*pos] & 0x7Fu) << shift;
        if (!(b[(*pos)++] & 0x80u)) {
            if (v > 0xFFFFFFFFu)
                return -1;
            *out = (uint32_t)v;
            return 0;
        }
    }
    return -1;
}

static int skip_string(const uint8_t *b, uint32_t len, uint32_t *pos)
{
    uint32_t n;
    if (rd_var(b, len, pos, &n) || n > len - *pos)
        return -1;
    *pos += n;
    return 0;
}

static inputs_t *read_inputs(const uint8_t *b, uint32_t len, uint32_t pos, uint32_t n)
{
    inputs_t *in = calloc(n ? n : 1, sizeof *in);
    uint32_t i, k, d;
    if (!in || skip_string(b, len, &pos))
        goto bad;
    for (i = 0; i < n; i++) {
        if (skip_string(b, len, &pos) || ++pos > len || skip_string(b, len, &pos) || ++pos > len ||
            rd_var(b, len, &pos, &in[i].count) || in[i].count > len)
            goto bad;
        in[i].ids = calloc(in[i].count ? in[i].count : 1, sizeof(uint32_t));
        if (!in[i].ids)
            goto bad;
        for (k = 0; k < in[i].count; k++) {
            if (rd_var(b, len, &pos, &d) || d > i - 1u || i == 0)
                goto bad;
            in[i].ids[k] = i - 1u - d;
        }
    }
    return in;
bad:
    fprintf(stderr, "error: malformed node table\n");
    exit(2);
}

/* Validation only: the status poet_open gives each file, with an arena of arena_len
 * bytes (never dereferenced by poet_open: a one-byte stand-in is passed) and ample
 * where entries. */
static int check_files(int count, char **paths, size_t arena_len)
{
    static poet_where_t where[1u << 16];
    static uint8_t fake;
    int k, rc;
    long size;
    FILE *f;
    uint8_t *buf;
    poet_prog p;
    for (k = 0; k < count; k++) {
        f = fopen(paths[k], "rb");
        if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
            return 2;
        buf = malloc(size ? (size_t)size : 1u);
        if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size)
            return 2;
        fclose(f);
        rc = poet_open(&p, buf, (size_t)size, &fake, arena_len, where, sizeof where / sizeof *where);
        if (rc == POET_E_RESOURCES)
            printf("%s %s needs arena_bytes=%llu n_nodes=%lu\n", poet_strerror(rc), paths[k],
                   (unsigned long long)poet_arena_bytes(&p), (unsigned long)poet_n_nodes(&p));
        else
            printf("%s %s\n", poet_strerror(rc), paths[k]);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int quiet = 0, a, rc;
    FILE *f;
    long size;
    uint8_t *buf, *arena = NULL, dummy = 0;
    poet_where_t *where = NULL, no_where = 0;
    uint32_t i, table, n_instr;
    int status;
    uint64_t flash_total = 0;
    poet_prog p;
    poet_instr ins;
    sim_t s;
    poet_callbacks cb = {k_compute, k_page_out, k_page_in, k_free, k_fence, k_move};

    if (argc > 1 && !strcmp(argv[1], "-c")) {
        if (argc > 3 && !strcmp(argv[2], "-a")) {
            char *end;
            unsigned long long claim = strtoull(argv[3], &end, 10);
            if (*end || end == argv[3] || claim > (unsigned long long)POET_MAX_ARENA) {
                fprintf(stderr, "error: -a wants a byte count up to %llu\n", (unsigned long long)POET_MAX_ARENA);
                return 2;
            }
            return check_files(argc - 4, argv + 4, (size_t)claim);
        }
        return check_files(argc - 2, argv + 2, (size_t)POET_MAX_ARENA);
    }
    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-q"))
            quiet = 1;
        else
            path = argv[a];
    }
    if (!path) {
        fprintf(stderr, "usage: harness [-q] FILE.poet\n");
        return 2;
    }
    f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return 2;
    }
    buf = malloc(size ? (size_t)size : 1u);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return 2;
    }
    fclose(f);

    /* First open with no resources: POET_E_RESOURCES tells how much the file needs. */
    rc = poet_open(&p, buf, (size_t)size, &dummy, 0, &no_where, 0);
    if (rc == POET_E_RESOURCES && poet_arena_bytes(&p) > POET_MAX_ARENA) {
        fprintf(stderr, "error: POET_E_RESOURCES: the file needs a %llu B arena, this build addresses at most %llu B\n",
                (unsigned long long)poet_arena_bytes(&p), (unsigned long long)POET_MAX_ARENA);
        printf("# status POET_E_RESOURCES\n# arena_bytes %llu\n", (unsigned long long)poet_arena_bytes(&p));
        free(buf);
        return 2;
    }
    if (rc == POET_E_RESOURCES || (rc == POET_OK && poet_n_nodes(&p) == 0)) {
        where = calloc(poet_n_nodes(&p) + 1u, sizeof *where);
        arena = calloc((size_t)poet_arena_bytes(&p) + 1u, 1);
        if (!where || !arena) {
            fprintf(stderr, "error: cannot allocate a %llu B arena\n", (unsigned long long)poet_arena_bytes(&p));
            return 2;
        }
        rc = poet_open(&p, buf, (size_t)size, arena, (size_t)poet_arena_bytes(&p), where, poet_n_nodes(&p));
    }
    if (rc != POET_OK) {
        fprintf(stderr, "error: %s\n", poet_strerror(rc));
        printf("# status %s\n", poet_strerror(rc));
        free(where), free(arena), free(buf);
        return 2;
    }
    memset(&s, 0, sizeof s);
    s.p = &p;
    s.n = poet_n_nodes(&p);
    n_instr = poet_n_instructions(&p);
    s.sig = calloc(s.n + 1u, sizeof *s.sig);
    s.known = calloc(s.n + 1u, 1);
    s.in_flight = calloc(s.n + 1u, 1);
    s.flash_at = calloc(s.n + 1u, sizeof *s.flash_at);
    s.pend_node = calloc(n_instr + 1u, sizeof(uint32_t));
    s.pend_off = calloc(n_instr + 1u, sizeof(uint64_t));
    s.pend_len = calloc(n_instr + 1u, sizeof(uint64_t));
    s.pend_dir = calloc(n_instr + 1u, 1);
    for (i = 0; i < s.n; i++) {
        s.flash_at[i] = flash_total;
        flash_total += poet_node_bytes(&p, i);
    }
    s.flash = flash_total < SIZE_MAX ? calloc((size_t)flash_total + 1u, 1) : NULL;
    if (!s.sig || !s.known || !s.in_flight || !s.flash_at || !s.pend_node || !s.pend_off || !s.pend_len ||
        !s.pend_dir || !s.flash)
        return 2;
    if (poet_node_table(&p, &table))
        s.inputs = read_inputs(buf, (uint32_t)size, table, s.n);

    while ((rc = poet_step(&p, &cb, &s, &ins)) == POET_OK) {
        if (quiet)
            continue;
        if (ins.op == POET_OP_FENCE)
            printf("FENCE\n");
        else
            printf("%s %u @%llu\n", OPS[ins.op], (unsigned)ins.node, (unsigned long long)ins.offset);
    }
    if (rc != POET_DONE) {
        fprintf(stderr, "error: %s\n", poet_strerror(rc));
        return 2;
    }
    for (i = 0; i < s.n; i++)
        if (!s.known[i])
            fail(&s, "node never computed (node, 0)", i, 0);
    if (s.n_pend)
        fail(&s, "transfers still in flight at the end (count, 0)", s.n_pend, 0);
    printf("# status %s\n", s.failed ? "VERIFY_FAILED" : "POET_OK");
    printf("# nodes %u\n# instructions %u\n# arena_bytes %llu\n", (unsigned)s.n, (unsigned)n_instr,
           (unsigned long long)poet_arena_bytes(&p));
    printf("# peak_live_bytes %llu\n# arena_high_water %llu\n", (unsigned long long)s.peak_live,
           (unsigned long long)s.high_water);
    printf("# inputs_checked %llu\n# node_table %d\n", (unsigned long long)s.checked, s.inputs != NULL);
    printf("# flash_written_bytes %llu\n# flash_read_bytes %llu\n", (unsigned long long)s.flash_out,
           (unsigned long long)s.flash_in);
    printf("# state_bytes %u\n", (unsigned)sizeof(poet_prog));
    status = s.failed ? 1 : 0;
    if (s.inputs) {
        for (i = 0; i < s.n; i++)
            free(s.inputs[i].ids);
        free(s.inputs);
    }
    free(s.sig), free(s.known), free(s.in_flight), free(s.flash_at), free(s.flash);
    free(s.pend_node), free(s.pend_off), free(s.pend_len), free(s.pend_dir);
    free(where), free(arena), free(buf);
    return status;
}
