/*
 * fuzz_loader.c - libFuzzer target for the POET loader and interpreter.
 *
 * Each input is tried twice: as given (exercises the header, length and CRC checks) and
 * with its CRC field recomputed (so mutations reach the section, operand and dry-run
 * checks behind the CRC). When a file validates, it is executed with callbacks that
 * write every output buffer and read every transferred (or moved) one, on an arena allocated to
 * exactly the declared size, so AddressSanitizer catches any offset the validation let
 * through. Build and run: see runtime/c/README.md (make fuzz; ./fuzz.sh SECONDS).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "poet_runtime.h"

#define MAX_NODES 4096u
#define MAX_ARENA (1u << 22)

static uint8_t sink;

static int f_compute(void *user, uint32_t node, uint8_t *arena, const poet_where_t *where)
{
    poet_prog *p = user;
    poet_size_t off = POET_WHERE_OFFSET(where[node]);
    memset(arena + off, (int)node, (size_t)(poet_node_bytes(p, node) + poet_node_workspace(p, node)));
    return 0;
}

static int f_page(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes)
{
    poet_size_t j;
    (void)user;
    (void)node;
    for (j = 0; j < bytes; j++)
        sink ^= arena[offset + j];
    return 0;
}

static int f_move(void *user, uint32_t node, uint8_t *arena, poet_size_t from, poet_size_t to, poet_size_t bytes)
{
    /* Touch both regions before the runtime's own copy, so ASan sees a bad one either way. */
    return f_page(user, node, arena, from, bytes) | f_page(user, node, arena, to, bytes);
}

static void try_one(const uint8_t *data, size_t size)
{
    static poet_where_t where[MAX_NODES];
    static uint8_t fake;
    poet_prog p;
    poet_callbacks cb = {f_compute, f_page, f_page, f_page, NULL, f_move};
    uint8_t *arena;
    /* Validate with the largest arena this build addresses (never dereferenced by the
     * runtime itself), so large-arena headers and offsets are checked too; execute only
     * what fits a real allocation. */
    int rc = poet_open(&p, data, size, &fake, (size_t)POET_MAX_ARENA, where, MAX_NODES);
    if (rc != POET_OK || poet_arena_bytes(&p) > MAX_ARENA)
        return;
    arena = malloc(poet_arena_bytes(&p) ? (size_t)poet_arena_bytes(&p) : 1u);
    if (!arena)
        return;
    if (poet_open(&p, data, size, arena, (size_t)poet_arena_bytes(&p), where, MAX_NODES) == POET_OK &&
        poet_run(&p, &cb, &p) != POET_OK)
        abort(); /* after a successful open, only callbacks may fail */
    free(arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy;
    uint32_t crc;
    try_one(data, size);
    if (size < 11)
        return 0;
    copy = malloc(size);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    crc = poet_crc32(poet_crc32(0, copy, 6), copy + 10, size - 10);
    copy[6] = (uint8_t)crc;
    copy[7] = (uint8_t)(crc >> 8);
    copy[8] = (uint8_t)(crc >> 16);
    copy[9] = (uint8_t)(crc >> 24);
    try_one(copy, size);
    free(copy);
    return 0;
}
