/*
 * poet_runtime.h - C99 loader and interpreter for .poet schedule bytecode (versions 2, 3 and 4).
 *
 * The format is specified in docs/bytecode.md. The runtime never allocates, never
 * prints and uses only <stddef.h>/<stdint.h>. The caller owns three pieces of memory:
 *   - the .poet bytes (may live in flash; read only),
 *   - the arena (arena_bytes from the header, RAM the kernels compute in),
 *   - the "where" table: one poet_where_t per graph node, which the runtime keeps up to
 *     date with the arena offset of every node's buffer. The compute callback gets it,
 *     so a kernel finds each input at arena + POET_WHERE_OFFSET(where[input]).
 * poet_open() validates the whole file (header, CRC, every operand, and a dry run of
 * every instruction: node ranges, residency, arena bounds, no overlap with any live
 * buffer) before anything is executed; after a successful open, poet_step()/poet_run()
 * can only fail when a callback fails. Version 4 adds MOVE (arena compaction): the
 * runtime itself copies the buffer to its new offset (memmove semantics) and updates
 * where[]; -DPOET_MEMMOVE=memmove uses the C library's memmove instead of the runtime's
 * byte loop.
 *
 * Copy poet_runtime.h and poet_runtime.c into a firmware project, or build the static
 * library with the Makefile/CMakeLists.txt beside them.
 *
 * Width: version 3 files carry arenas and offsets of any size (below 2^59). A where word
 * and the offsets and byte counts passed to callbacks are as wide as size_t: 32 bits on
 * a Cortex-M (arenas up to 1 GiB - 1: bits 30-31 of a where word are state bits), 64
 * bits on a 64-bit host (any arena). A file whose arena does not fit this build is
 * refused by poet_open with POET_E_RESOURCES, and poet_arena_bytes()
 * then reports the 64-bit size it needs: nothing is ever truncated. -DPOET_WHERE_BITS=32
 * or 64 overrides the choice (a 64-bit where word on a 32-bit target is still limited
 * to SIZE_MAX).
 */
#ifndef POET_RUNTIME_H
#define POET_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POET_VERSION 4u      /* the newest version read: poetc writes 3, or 4 for a program with a MOVE */
#define POET_VERSION_MIN 2u  /* version 2: the same layout, read with version 3's limits */
#define POET_VERSION_MOVE 4u /* the first version with MOVE; below it, MOVE's byte is a FENCE with an
                                operand (POET_E_OPCODE) */

#ifndef POET_WHERE_BITS
#if SIZE_MAX > 0xFFFFFFFFu
#define POET_WHERE_BITS 64
#else
#define POET_WHERE_BITS 32
#endif
#endif

/* poet_where_t: one entry of the caller's where table. poet_size_t: the arena offsets and
 * byte counts the runtime passes to callbacks and returns in poet_instr. */
#if POET_WHERE_BITS == 64
typedef uint64_t poet_where_t;
typedef uint64_t poet_size_t;
#define POET_WHERE_GONE 0x8000000000000000u
#define POET_WHERE_FLASH 0x4000000000000000u
#elif POET_WHERE_BITS == 32
typedef uint32_t poet_where_t;
typedef uint32_t poet_size_t;
#define POET_WHERE_GONE 0x80000000u
#define POET_WHERE_FLASH 0x40000000u
#else
#error "POET_WHERE_BITS must be 32 or 64"
#endif

/* Return codes. Negative values are errors; the names match the Python decoder's
 * BytecodeFormatError.code. */
enum poet_status {
    POET_OK = 0,                /* success / instruction executed */
    POET_DONE = 1,              /* poet_step: no instruction left */
    POET_E_ARG = -1,            /* NULL pointer argument */
    POET_E_TRUNCATED = -2,      /* file shorter than its header or declared length, or a field runs off the end */
    POET_E_MAGIC = -3,          /* does not start with "POET" */
    POET_E_VERSION = -4,        /* version byte is not 2, 3 or 4 */
    POET_E_FLAGS = -5,          /* unknown flag bits, or WORKSPACE without SIZES */
    POET_E_LENGTH = -6,         /* declared length smaller than the buffer (trailing bytes) */
    POET_E_CRC = -7,            /* CRC-32 mismatch */
    POET_E_MALFORMED = -8,      /* bad varint, palette entry >= 2^59, workspace bitmap past n_nodes, repeated offset, stray bytes */
    POET_E_COUNT = -9,          /* more than 2^20 nodes, or a count/table index exceeds what the file can hold */
    POET_E_OPCODE = -10,        /* FENCE with a nonzero operand (in a version 2 or 3 file: MOVE needs 4) */
    POET_E_NODE = -11,          /* node id outside 0..n_nodes-1 */
    POET_E_OFFSET = -12,        /* offset index outside the table, buffer past the arena, arena or offset >= 2^59 */
    POET_E_STATE = -13,         /* COMPUTE/PAGE_IN of a resident node, FREE/PAGE_OUT/MOVE of an absent one, PAGE_IN never paged out */
    POET_E_OVERLAP = -14,       /* an allocation (or a MOVE's new region) overlaps a live buffer */
    POET_E_NOT_EXECUTABLE = -15,/* file lacks SIZES, OFFSETS or ARENA (a planning-stage file) */
    POET_E_RESOURCES = -16,     /* caller's arena or where table is smaller than the file needs, or the arena
                                   does not fit this build's size_t / where word (POET_MAX_ARENA) */
    POET_E_CALLBACK = -17       /* a callback returned nonzero; the instruction was not executed */
};

/* Instruction opcodes as reported to the caller (same numbers as the Python Op enum). */
enum poet_op {
    POET_OP_COMPUTE = 0,
    POET_OP_PAGE_OUT = 1,
    POET_OP_PAGE_IN = 2,
    POET_OP_FREE = 3,
    POET_OP_FENCE = 4,
    POET_OP_MOVE = 5 /* version 4 */
};

/* Header flag bits. */
#define POET_F_SIZES 0x01u
#define POET_F_WORKSPACE 0x02u
#define POET_F_OFFSETS 0x04u
#define POET_F_ARENA 0x08u
#define POET_F_NODE_TABLE 0x10u

/* where[] entries: the top bit "not in RAM", the next "a copy is on flash", the others
 * the last arena offset (bits 0-29 of a 32-bit word, 0-61 of a 64-bit one). A
 * never-allocated node holds POET_WHERE_NONE. */
#define POET_WHERE_NONE POET_WHERE_GONE
#define POET_WHERE_OFFSET_MASK (POET_WHERE_FLASH - 1u)
#define POET_WHERE_OFFSET(w) ((w) & POET_WHERE_OFFSET_MASK)
#define POET_WHERE_RESIDENT(w) (((w) & POET_WHERE_GONE) == 0u)
/* The largest arena (and node size) this build runs: it fits size_t and a where word's
 * offset bits. The format's own limit is POET_FORMAT_MAX_BYTES (exclusive). */
#define POET_MAX_ARENA ((uint64_t)SIZE_MAX < (uint64_t)POET_WHERE_OFFSET_MASK ? (uint64_t)SIZE_MAX \
                                                                             : (uint64_t)POET_WHERE_OFFSET_MASK)
#define POET_FORMAT_MAX_BYTES 0x0800000000000000u /* 2^59: arena, offsets and sizes are below it */
#define POET_MAX_NODES 0x100000u /* 2^20 */

/* One decoded instruction (poet_step's optional output). For FENCE node = offset =
 * bytes = 0. bytes is the node's output size; workspace its workspace (COMPUTE only),
 * which lies right after the output in the arena. For MOVE offset is the new offset. */
typedef struct poet_instr {
    uint8_t op;
    uint32_t node;
    poet_size_t offset;
    poet_size_t bytes;
    poet_size_t workspace;
} poet_instr;

/* User callbacks. Any may be NULL (treated as success). Return 0 on success; anything
 * else stops the run with POET_E_CALLBACK and leaves the instruction unexecuted, so a
 * later poet_step() retries it.
 *   compute: run node's kernel. Its output is at arena + POET_WHERE_OFFSET(where[node])
 *            (already set), its workspace right after the output, and every input i at
 *            arena + POET_WHERE_OFFSET(where[i]) (resident). The kernel knows its inputs.
 *   page_out: start copying bytes at arena+offset to the node's flash slot. The buffer
 *            stays untouched until the next fence.
 *   page_in: start copying the node's flash slot to arena+offset; readable after the
 *            next fence.
 *   free:    the buffer at arena+offset is dead (bookkeeping only; may be NULL).
 *   fence:   wait until every transfer started since the previous fence has finished.
 *   move:    (version 4; bookkeeping, may be NULL) the runtime is about to copy the node's
 *            bytes from arena+from to arena+to (the regions may overlap) and set where[node]
 *            to `to`; it does both after the callback returns 0. The last member: an
 *            initializer that lists only the first five leaves it NULL. */
typedef struct poet_callbacks {
    int (*compute)(void *user, uint32_t node, uint8_t *arena, const poet_where_t *where);
    int (*page_out)(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes);
    int (*page_in)(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes);
    int (*free)(void *user, uint32_t node, uint8_t *arena, poet_size_t offset, poet_size_t bytes);
    int (*fence)(void *user);
    int (*move)(void *user, uint32_t node, uint8_t *arena, poet_size_t from, poet_size_t to, poet_size_t bytes);
} poet_callbacks;

/* Loader and interpreter state: all the RAM the runtime uses besides the caller's where
 * table (80 bytes on a 32-bit MCU). Tables are not copied or cached: lookups re-read the
 * (validated) file. Fields are private; read them through the functions below. */
typedef struct poet_prog {
    const uint8_t *buf;
    uint8_t *arena;
    poet_where_t *where;
    uint64_t arena_bytes;
    uint32_t len, n_nodes, n_instr;
    uint32_t sizes, work, off_tab, code; /* byte positions: size/workspace/offset tables, first instruction */
    /* execution registers */
    uint32_t pc, index, frontier, far_free, last_io, prev_slot;
    int32_t prev_compute;
} poet_prog;

/* Validate buf[0..len) completely, then prepare to execute from the first instruction.
 * arena must hold at least the header's arena size; where at least n_nodes entries.
 * On error nothing is executed and the return value says why. */
int poet_open(poet_prog *p, const uint8_t *buf, size_t len, uint8_t *arena, size_t arena_len,
              poet_where_t *where, size_t n_where);

/* Rewind to the first instruction and reset the where table (to run the step again). */
void poet_reset(poet_prog *p);

/* Execute one instruction: POET_OK, POET_DONE at the end, or an error. */
int poet_step(poet_prog *p, const poet_callbacks *cb, void *user, poet_instr *out);

/* Execute every remaining instruction: POET_OK at the end, or the first error. */
int poet_run(poet_prog *p, const poet_callbacks *cb, void *user);

uint32_t poet_n_nodes(const poet_prog *p);
uint32_t poet_n_instructions(const poet_prog *p);
/* The header's arena size: 64 bits, so that after POET_E_RESOURCES it reports what a file
 * needs even when that does not fit this build's size_t. */
uint64_t poet_arena_bytes(const poet_prog *p);
uint32_t poet_pc(const poet_prog *p);                       /* index of the next instruction */
uint64_t poet_node_bytes(const poet_prog *p, uint32_t node); /* output bytes (0 if out of range) */
uint64_t poet_node_workspace(const poet_prog *p, uint32_t node);
/* Byte range [*pos, len) of the node table, or 0 if the file has none. */
int poet_node_table(const poet_prog *p, uint32_t *pos);

/* Short name of a status code ("POET_E_CRC"); never NULL. */
const char *poet_strerror(int status);

/* CRC-32 (IEEE 802.3) continued from crc (0 to start), exactly as zlib.crc32(data, crc).
 * A file's CRC field holds poet_crc32(poet_crc32(0, file, 6), file + 10, len - 10). */
uint32_t poet_crc32(uint32_t crc, const uint8_t *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* POET_RUNTIME_H */
