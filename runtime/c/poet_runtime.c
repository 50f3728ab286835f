/*
 * poet_runtime.c - C99 loader and interpreter for .poet bytecode (docs/bytecode.md).
 *
 * Every read goes through a bounds-checked cursor, every count is checked against the
 * bytes that are left before anything loops over it, and all arithmetic on untrusted
 * values is done in 64 bits on quantities below 2^59 (a palette entry's value is checked
 * before it is formed), so no input can read out of bounds, overflow or hang.
 * The checks and their order mirror poet_compiler/codegen/bytecode.py, so the Python
 * decoder and this runtime report the same error class for the same file.
 */
#include "poet_runtime.h"
#ifdef POET_MEMMOVE
#include <string.h>
#endif

#define PREFIX 10u
#define IMM_ESCAPE 31u
#define U32MAX 0xFFFFFFFFu
#define U64MAX 0xFFFFFFFFFFFFFFFFu

/* Version 2 has version 3's layout; both are read with version 3's limits
 * (docs/bytecode.md, "Versions"): wide varints (arena, offset-table gap codes, palette
 * entry codes) below 2^64, byte quantities below POET_FORMAT_MAX_BYTES = 2^59. */
#define WIDE U64MAX

enum { C_SEQ, C_NEW, C_X, C_FREE_C, C_FREE_F, C_PAGE_OUT, C_PAGE_IN, C_FENCE };
/* What a placed instruction does (its poet_op): allocate for a COMPUTE (output and
 * workspace) or a PAGE_IN (output), or MOVE a resident buffer (version 4: code 7 with a
 * nonzero immediate). */
enum { K_COMPUTE = POET_OP_COMPUTE, K_PAGE_IN = POET_OP_PAGE_IN, K_MOVE = POET_OP_MOVE, K_NONE = -1 };

uint32_t poet_crc32(uint32_t crc, const uint8_t *data, size_t len)
{
    crc = ~crc;
    size_t i;
    int k;
    for (i = 0; i < len; i++) {
        crc ^= data[i];
        for (k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* ---- bounded reads ------------------------------------------------------------- */
static int rd_u8(const poet_prog *p, uint32_t *pos, uint32_t *out)
{
    if (*pos >= p->len)
        return POET_E_TRUNCATED;
    *out = p->buf[(*pos)++];
    return POET_OK;
}

/* Unsigned LEB128, minimal encoding, value <= limit (U32MAX or WIDE), at most
 * ceil(bits(limit) / 7) bytes: 5 or 10. */
static int rd_var64(const poet_prog *p, uint32_t *pos, uint64_t *out, uint64_t limit)
{
    uint64_t value = 0;
    uint32_t start = *pos, shift, byte;
    for (shift = 0; shift < (limit > U32MAX ? 70u : 35u); shift += 7u) {
        if (rd_u8(p, pos, &byte) != POET_OK)
            return POET_E_TRUNCATED;
        if (shift == 63u && byte > 1u)
            return POET_E_MALFORMED; /* the 10th byte may only be 0 (not minimal) or 1: 2^64 and up */
        value |= (uint64_t)(byte & 0x7Fu) << shift;
        if (!(byte & 0x80u)) {
            if (value > limit || (byte == 0u && *pos - start > 1u))
                return POET_E_MALFORMED;
            *out = value;
            return POET_OK;
        }
    }
    return POET_E_MALFORMED;
}

static int rd_var(const poet_prog *p, uint32_t *pos, uint32_t *out)
{
    uint64_t v;
    int rc = rd_var64(p, pos, &v, U32MAX);
    *out = (uint32_t)v;
    return rc;
}

/* A varint of an already validated table (cannot fail). */
static uint32_t var_at(const poet_prog *p, uint32_t *pos)
{
    uint32_t v = 0;
    (void)rd_var(p, pos, &v);
    return v;
}

/* Instruction immediate: 5 bits, 31 continues with a varint. */
static int rd_imm(const poet_prog *p, uint32_t *pos, uint32_t first, uint32_t *out)
{
    uint32_t more;
    int rc;
    *out = first >> 3;
    if (*out != IMM_ESCAPE)
        return POET_OK;
    rc = rd_var(p, pos, &more);
    if (rc != POET_OK)
        return rc;
    if ((uint64_t)more + IMM_ESCAPE > U32MAX)
        return POET_E_MALFORMED;
    *out = more + IMM_ESCAPE;
    return POET_OK;
}

static int64_t unzz(uint32_t v) { return (v & 1u) ? -(int64_t)((v >> 1) + 1u) : (int64_t)(v >> 1); }

/* ---- size tables (docs/bytecode.md, "Size table and workspace table") ------------- */
/* Palette entry code -> value: (code >> 5) << (code & 31), for a validated code. */
static uint64_t entry_value(uint64_t code) { return (code >> 5) << (code & 31u); }

/* Whether code's value is below limit, decided without forming the value (which may
 * not fit 64 bits): m << t < limit  <=>  m <= (limit - 1) >> t. */
static int entry_below(uint64_t code, uint64_t limit) { return (code >> 5) <= ((limit - 1u) >> (code & 31u)); }

static uint32_t index_bits(uint32_t count)
{
    uint32_t bits = 0;
    while (count > 1u && ((count - 1u) >> bits))
        bits++;
    return bits;
}

/* Read `count` (validated) palette entry codes from *pos; the value of the last one. */
static uint64_t pal_walk(const poet_prog *p, uint32_t *pos, uint32_t count)
{
    uint64_t code = 0;
    while (count--)
        (void)rd_var64(p, pos, &code, WIDE);
    return entry_value(code);
}

/* Entry k of the palette whose entry codes start at pos (validated: k < count). */
static uint64_t pal_entry(const poet_prog *p, uint32_t pos, uint32_t k) { return pal_walk(p, &pos, k + 1u); }

/* Position after `count` palette entry codes starting at pos (validated). */
static uint32_t skip_vars(const poet_prog *p, uint32_t pos, uint32_t count)
{
    (void)pal_walk(p, &pos, count);
    return pos;
}

/* The k-th fixed-width index of the bit string at pos. */
static uint32_t packed(const poet_prog *p, uint32_t pos, uint32_t k, uint32_t bits)
{
    uint32_t bit = k * bits, v = 0, i;
    for (i = 0; i < bits; i++, bit++)
        v |= (uint32_t)((p->buf[pos + (bit >> 3)] >> (bit & 7u)) & 1u) << i;
    return v;
}

static int has_work(const poet_prog *p) { return (p->buf[5] & POET_F_WORKSPACE) != 0u; }

uint64_t poet_node_bytes(const poet_prog *p, uint32_t node)
{
    uint32_t pos = p->sizes, count, pal;
    if (node >= p->n_nodes)
        return 0u;
    count = var_at(p, &pos);
    pal = pos;
    return pal_entry(p, pal, packed(p, skip_vars(p, pal, count), node, index_bits(count)));
}

uint64_t poet_node_workspace(const poet_prog *p, uint32_t node)
{
    uint32_t pos = p->work, count, pal, map, rank = 0, i;
    if (node >= p->n_nodes || !has_work(p))
        return 0u;
    count = var_at(p, &pos);
    pal = pos;
    map = skip_vars(p, pal, count);
    if (!((p->buf[map + (node >> 3)] >> (node & 7u)) & 1u))
        return 0u;
    for (i = 0; i < node; i++) /* rank among the nodes that have workspace */
        rank += (p->buf[map + (i >> 3)] >> (i & 7u)) & 1u;
    return pal_entry(p, pal, packed(p, map + (p->n_nodes + 7u) / 8u, rank, index_bits(count)));
}

/* count + entry codes; returns the palette size. */
static int rd_palette(const poet_prog *p, uint32_t *pos, uint32_t *count)
{
    uint64_t code;
    uint32_t k;
    int rc;
    if ((rc = rd_var(p, pos, count)))
        return rc;
    if (*count > p->n_nodes)
        return POET_E_COUNT;
    if (*count > p->len - *pos)
        return POET_E_TRUNCATED;
    for (k = 0; k < *count; k++) {
        if ((rc = rd_var64(p, pos, &code, WIDE)))
            return rc;
        if (!entry_below(code, POET_FORMAT_MAX_BYTES))
            return POET_E_MALFORMED;
    }
    if (p->n_nodes && !*count)
        return POET_E_COUNT;
    return POET_OK;
}

/* `n` packed indices at *pos, each < count. */
static int rd_indices(const poet_prog *p, uint32_t *pos, uint32_t n, uint32_t count)
{
    uint32_t bits = index_bits(count), k;
    uint64_t need = ((uint64_t)n * bits + 7u) / 8u;
    if (need > p->len - *pos)
        return POET_E_TRUNCATED;
    for (k = 0; k < n; k++)
        if (packed(p, *pos, k, bits) >= count)
            return POET_E_COUNT;
    *pos += (uint32_t)need;
    return POET_OK;
}

static int rd_sizes(poet_prog *p, uint32_t *pos)
{
    uint32_t count;
    int rc;
    p->sizes = *pos;
    if ((rc = rd_palette(p, pos, &count)))
        return rc;
    return rd_indices(p, pos, p->n_nodes, count);
}

static int rd_work(poet_prog *p, uint32_t *pos)
{
    uint32_t count, map, nbytes = (uint32_t)(((uint64_t)p->n_nodes + 7u) / 8u), nnz = 0, i;
    int rc;
    p->work = *pos;
    if ((rc = rd_palette(p, pos, &count)))
        return rc;
    if (nbytes > p->len - *pos)
        return POET_E_TRUNCATED;
    map = *pos;
    *pos += nbytes;
    if (nbytes && (p->buf[map + nbytes - 1u] >> (p->n_nodes - 8u * (nbytes - 1u))))
        return POET_E_MALFORMED; /* bits past the last node */
    for (i = 0; i < p->n_nodes; i++)
        nnz += (p->buf[map + (i >> 3)] >> (i & 7u)) & 1u;
    return rd_indices(p, pos, nnz, count);
}

/* Offset-table gap code v: size palette entry v, or v - (palette count). */
static uint64_t gap_of(const poet_prog *p, uint64_t v)
{
    uint32_t pos = p->sizes, count = var_at(p, &pos);
    return v < count ? pal_entry(p, pos, (uint32_t)v) : v - count;
}

/* A gap code of the (validated) offset table. */
static uint64_t gap_at(const poet_prog *p, uint32_t *pos)
{
    uint64_t v = 0;
    (void)rd_var64(p, pos, &v, WIDE);
    return gap_of(p, v);
}

/* Offset of entry `index` of the offset table (validated at open: below the arena). */
static uint64_t offset_entry(const poet_prog *p, uint32_t index)
{
    uint32_t pos = p->off_tab, j;
    uint64_t acc = 0;
    (void)var_at(p, &pos);
    for (j = 0; j <= index; j++)
        acc += gap_at(p, &pos);
    return acc;
}

static int rd_offsets(poet_prog *p, uint32_t *pos)
{
    uint32_t count, j;
    uint64_t acc = 0, gap, v;
    int rc;
    p->off_tab = *pos;
    if ((rc = rd_var(p, pos, &count)))
        return rc;
    if (count > p->n_instr)
        return POET_E_COUNT;
    if (count > p->len - *pos)
        return POET_E_TRUNCATED;
    for (j = 0; j < count; j++) {
        if ((rc = rd_var64(p, pos, &v, WIDE)))
            return rc;
        gap = gap_of(p, v);
        if (j && gap == 0u)
            return POET_E_MALFORMED;
        if (gap >= POET_FORMAT_MAX_BYTES - acc) /* acc + gap >= the limit, without overflow */
            return POET_E_OFFSET;
        acc += gap;
    }
    if (count && acc > p->arena_bytes)
        return POET_E_OFFSET;
    return POET_OK;
}

/* ---- one instruction ------------------------------------------------------------ */
/* Offset-table slot: entry prev_slot + unzz(code). */
static int take_slot(poet_prog *p, uint32_t code, uint64_t *offset)
{
    uint32_t pos = p->off_tab, n_off = var_at(p, &pos);
    int64_t index = (int64_t)p->prev_slot + unzz(code);
    if (index < 0 || index >= (int64_t)n_off)
        return POET_E_OFFSET;
    p->prev_slot = (uint32_t)index;
    *offset = offset_entry(p, (uint32_t)index);
    return POET_OK;
}

/* Placement code v >= 1 (docs/bytecode.md, "Placement"): odd v = 2r+1 is the r-th
 * smallest of {0} and the end of every resident buffer; even v = 2r+2 puts the buffer
 * right below the r-th largest of {arena end} and the start of every resident buffer.
 * A MOVE's candidates leave the moved buffer out. Needs no memory: each rank step is
 * one scan of the where table. */
static int place(const poet_prog *p, uint32_t node, uint32_t v, int kind, uint64_t *offset)
{
    uint32_t rank = (v - 1u) / 2u, r, j;
    poet_where_t w;
    uint64_t cur = (v & 1u) ? 0u : p->arena_bytes, best, e, extent;
    int found;
    for (r = 0; r < rank; r++) {
        found = 0;
        best = 0;
        for (j = 0; j < p->n_nodes; j++) {
            w = p->where[j];
            if (!POET_WHERE_RESIDENT(w) || (kind == K_MOVE && j == node))
                continue;
            e = POET_WHERE_OFFSET(w);
            if (v & 1u) {
                e += poet_node_bytes(p, j);
                if (e > cur && (!found || e < best))
                    best = e, found = 1;
            } else if (e < cur && (!found || e > best)) {
                best = e, found = 1;
            }
        }
        if (!found)
            return POET_E_OFFSET;
        cur = best;
    }
    if (!(v & 1u)) {
        extent = poet_node_bytes(p, node) + (kind == K_COMPUTE ? poet_node_workspace(p, node) : 0u);
        if (extent > cur)
            return POET_E_OFFSET;
        cur -= extent;
    }
    *offset = cur;
    return POET_OK;
}

/* Checks after placement (state, arena bounds, overlap), as the Python _Machine: an
 * allocation needs the node absent (a PAGE_IN: with a flash copy), a MOVE resident; a
 * MOVE's new region may overlap its own old one. */
static int check_alloc(const poet_prog *p, uint32_t node, uint64_t offset, int kind, int full)
{
    poet_where_t w;
    uint32_t j;
    uint64_t end, size, osize, at;
    w = p->where[node];
    if (POET_WHERE_RESIDENT(w) != (kind == K_MOVE))
        return POET_E_STATE;
    if (kind == K_PAGE_IN && !(w & POET_WHERE_FLASH))
        return POET_E_STATE;
    size = poet_node_bytes(p, node); /* sizes, workspace and offsets < 2^59: no overflow */
    end = offset + size + (kind == K_COMPUTE ? poet_node_workspace(p, node) : 0u);
    if (end > p->arena_bytes)
        return POET_E_OFFSET;
    if (full && end > offset) {
        for (j = 0; j < p->n_nodes; j++) {
            w = p->where[j];
            if (!POET_WHERE_RESIDENT(w) || j == node)
                continue;
            osize = poet_node_bytes(p, j);
            at = POET_WHERE_OFFSET(w);
            if (osize && offset < at + osize && at < end)
                return POET_E_OVERLAP;
        }
    }
    return POET_OK;
}

/* Range check, placement operand (and slot), then the allocation (or MOVE) checks. */
static int alloc(poet_prog *p, uint32_t *pos, int64_t node, uint32_t v, int kind, int full, uint64_t *off)
{
    uint32_t slot;
    int rc;
    if (node < 0 || node >= (int64_t)p->n_nodes)
        return POET_E_NODE;
    if (v == 0u) {
        if ((rc = rd_var(p, pos, &slot)) || (rc = take_slot(p, slot, off)))
            return rc;
    } else if ((rc = place(p, (uint32_t)node, v, kind, off))) {
        return rc;
    }
    return check_alloc(p, (uint32_t)node, *off, kind, full);
}

/* MOVE's copy: memmove semantics (the old and new regions may overlap). */
static void move_bytes(uint8_t *arena, poet_size_t to, poet_size_t from, poet_size_t n)
{
#ifdef POET_MEMMOVE
    (void)POET_MEMMOVE(arena + to, arena + from, (size_t)n);
#else
    uint8_t *d = arena + to;
    const uint8_t *s = arena + from;
    if (to < from) {
        while (n--)
            *d++ = *s++;
    } else if (to > from) {
        d += n;
        s += n;
        while (n--)
            *--d = *--s;
    }
#endif
}

/* Decode the instruction at pc, check it, and apply it: to the where table always, to
 * the arena (callbacks, MOVE's copy) only when executing (full == 0; poet_open's dry run
 * passes full = 1 and never touches the arena). */
static int exec_one(poet_prog *p, const poet_callbacks *cb, void *user, poet_instr *ins, int full)
{
    poet_prog save = *p;
    uint32_t pos = p->pc, first, imm, code, v;
    uint64_t off = 0;
    poet_where_t w;
    int64_t node = 0;
    int rc, kind;
    if (p->index >= p->n_instr)
        return POET_DONE;
    if ((rc = rd_u8(p, &pos, &first)) || (rc = rd_imm(p, &pos, first, &imm)))
        return rc;
    code = first & 7u;
    ins->node = ins->offset = ins->bytes = ins->workspace = 0;
    kind = K_NONE;
    switch (code) {
    case C_SEQ:
    case C_NEW:
    case C_X:
        node = code == C_X ? (int64_t)p->prev_compute + 1 + unzz(imm)
               : code == C_SEQ ? (int64_t)p->prev_compute + 1 : (int64_t)p->frontier;
        kind = K_COMPUTE;
        break;
    case C_PAGE_IN:
        node = (int64_t)p->last_io + unzz(imm);
        kind = K_PAGE_IN;
        break;
    case C_FREE_C:
    case C_FREE_F:
    case C_PAGE_OUT:
        node = (code == C_FREE_C ? (int64_t)p->prev_compute : code == C_FREE_F ? (int64_t)p->far_free
                                                                               : (int64_t)p->last_io) + unzz(imm);
        if (node < 0 || node >= (int64_t)p->n_nodes) {
            rc = POET_E_NODE;
            goto fail;
        }
        if (!POET_WHERE_RESIDENT(p->where[node])) {
            rc = POET_E_STATE;
            goto fail;
        }
        off = POET_WHERE_OFFSET(p->where[node]);
        if (code == C_PAGE_OUT) {
            ins->op = POET_OP_PAGE_OUT;
            p->last_io = (uint32_t)node;
        } else {
            ins->op = POET_OP_FREE;
            if (code == C_FREE_F)
                p->far_free = (uint32_t)node;
        }
        break;
    default:
        ins->op = POET_OP_FENCE;
        if (imm == 0u)
            break;
        /* MOVE (version 4): immediate 1 + zz(node - prev_compute), then a place. */
        if (p->buf[4] < POET_VERSION_MOVE) {
            rc = POET_E_OPCODE;
            goto fail;
        }
        node = (int64_t)p->prev_compute + unzz(imm - 1u);
        kind = K_MOVE;
        break;
    }
    if (kind != K_NONE) {
        /* The placement operand: COMPUTE_SEQ / COMPUTE_NEW carry it as their immediate. */
        v = imm;
        if ((code == C_X || code == C_PAGE_IN || code == C_FENCE) && (rc = rd_var(p, &pos, &v)))
            goto fail;
        if ((rc = alloc(p, &pos, node, v, kind, full, &off)))
            goto fail;
        ins->op = (uint8_t)kind;
        if (kind == K_COMPUTE) {
            p->prev_compute = (int32_t)node;
            if ((uint32_t)node + 1u > p->frontier)
                p->frontier = (uint32_t)node + 1u;
        } else if (kind == K_PAGE_IN) {
            p->last_io = (uint32_t)node;
        }
    }
    if (ins->op != POET_OP_FENCE) {
        /* Fits poet_size_t: the buffer lies inside the arena, and poet_open refused any
         * arena above POET_MAX_ARENA. */
        ins->node = (uint32_t)node;
        ins->offset = (poet_size_t)off;
        ins->bytes = (poet_size_t)poet_node_bytes(p, (uint32_t)node);
        if (ins->op == POET_OP_COMPUTE)
            ins->workspace = (poet_size_t)poet_node_workspace(p, (uint32_t)node);
    }
    /* Apply: callbacks first where they need the old state, then the where table. */
    w = ins->op == POET_OP_FENCE ? 0u : p->where[node];
    rc = POET_OK;
    switch (ins->op) {
    case POET_OP_COMPUTE:
        p->where[node] = (poet_where_t)off | (w & POET_WHERE_FLASH);
        if (cb && cb->compute && cb->compute(user, (uint32_t)node, p->arena, p->where))
            rc = POET_E_CALLBACK;
        break;
    case POET_OP_PAGE_IN:
        if (cb && cb->page_in && cb->page_in(user, (uint32_t)node, p->arena, ins->offset, ins->bytes))
            rc = POET_E_CALLBACK;
        p->where[node] = (poet_where_t)off | POET_WHERE_FLASH;
        break;
    case POET_OP_PAGE_OUT:
        if (cb && cb->page_out && cb->page_out(user, (uint32_t)node, p->arena, ins->offset, ins->bytes))
            rc = POET_E_CALLBACK;
        p->where[node] = w | POET_WHERE_FLASH;
        break;
    case POET_OP_FREE:
        if (cb && cb->free && cb->free(user, (uint32_t)node, p->arena, ins->offset, ins->bytes))
            rc = POET_E_CALLBACK;
        p->where[node] = w | POET_WHERE_GONE;
        break;
    case POET_OP_MOVE:
        if (cb && cb->move &&
            cb->move(user, (uint32_t)node, p->arena, POET_WHERE_OFFSET(w), ins->offset, ins->bytes))
            rc = POET_E_CALLBACK;
        else if (!full)
            move_bytes(p->arena, ins->offset, POET_WHERE_OFFSET(w), ins->bytes);
        p->where[node] = (poet_where_t)off | (w & POET_WHERE_FLASH);
        break;
    default:
        if (cb && cb->fence && cb->fence(user))
            rc = POET_E_CALLBACK;
        break;
    }
    if (rc != POET_OK) {
        if (ins->op != POET_OP_FENCE)
            p->where[node] = w;
        goto fail;
    }
    p->pc = pos;
    p->index++;
    return POET_OK;
fail:
    /* Leave registers as they were, so the instruction can be retried. */
    save.where = p->where;
    *p = save;
    return rc;
}

static void rewind_state(poet_prog *p)
{
    uint32_t i;
    p->pc = p->code;
    p->index = 0;
    p->frontier = p->far_free = p->last_io = p->prev_slot = 0;
    p->prev_compute = -1;
    for (i = 0; i < p->n_nodes; i++)
        p->where[i] = POET_WHERE_NONE;
}

int poet_open(poet_prog *p, const uint8_t *buf, size_t len, uint8_t *arena, size_t arena_len,
              poet_where_t *where, size_t n_where)
{
    uint32_t pos = PREFIX, declared, flags, i;
    poet_instr ins;
    int rc;
    if (!p || !buf || !where || !arena)
        return POET_E_ARG;
    p->buf = buf;
    p->arena = arena;
    p->where = where;
    p->n_nodes = p->n_instr = p->arena_bytes = 0;
    p->len = len > U32MAX ? U32MAX : (uint32_t)len;
    if (len < PREFIX + 1u) {
        for (i = 0; i < len && i < 4u; i++)
            if (buf[i] != (uint8_t) "POET"[i])
                return POET_E_MAGIC;
        return POET_E_TRUNCATED;
    }
    if (buf[0] != 'P' || buf[1] != 'O' || buf[2] != 'E' || buf[3] != 'T')
        return POET_E_MAGIC;
    if (buf[4] < POET_VERSION_MIN || buf[4] > POET_VERSION)
        return POET_E_VERSION;
    flags = buf[5];
    if ((flags & ~0x1Fu) || ((flags & POET_F_WORKSPACE) && !(flags & POET_F_SIZES)))
        return POET_E_FLAGS;
    if ((flags & (POET_F_SIZES | POET_F_OFFSETS | POET_F_ARENA)) != (POET_F_SIZES | POET_F_OFFSETS | POET_F_ARENA))
        return POET_E_NOT_EXECUTABLE;
    if ((rc = rd_var(p, &pos, &declared)))
        return rc;
    if (declared > len)
        return POET_E_TRUNCATED;
    if (declared < len)
        return POET_E_LENGTH;
    if (((uint32_t)buf[6] | (uint32_t)buf[7] << 8 | (uint32_t)buf[8] << 16 | (uint32_t)buf[9] << 24) !=
        poet_crc32(poet_crc32(0, buf, 6), buf + PREFIX, len - PREFIX))
        return POET_E_CRC;
    if ((rc = rd_var(p, &pos, &p->n_nodes)) || (rc = rd_var(p, &pos, &p->n_instr)) ||
        (rc = rd_var64(p, &pos, &p->arena_bytes, WIDE)))
        return rc;
    if (p->arena_bytes >= POET_FORMAT_MAX_BYTES)
        return POET_E_OFFSET;
    if (p->n_nodes > POET_MAX_NODES)
        return POET_E_COUNT;
    if (p->n_instr > p->len - pos)
        return POET_E_COUNT;
    if ((rc = rd_sizes(p, &pos)))
        return rc;
    if ((flags & POET_F_WORKSPACE) && (rc = rd_work(p, &pos)))
        return rc;
    if ((rc = rd_offsets(p, &pos)))
        return rc;
    if (p->n_instr > p->len - pos)
        return POET_E_COUNT;
    /* An arena this build cannot address (size_t, where word), or more than the caller
     * has: poet_arena_bytes() and poet_n_nodes() now say what the file needs. */
    if (p->arena_bytes > POET_MAX_ARENA || (uint64_t)arena_len < p->arena_bytes || n_where < p->n_nodes)
        return POET_E_RESOURCES;
    p->code = pos;
    /* Dry run: decode and check every instruction with the where table, no callbacks. */
    rewind_state(p);
    while ((rc = exec_one(p, NULL, NULL, &ins, 1)) == POET_OK) {
    }
    if (rc != POET_DONE)
        return rc;
    if (!(flags & POET_F_NODE_TABLE) && p->pc != p->len)
        return POET_E_MALFORMED;
    rewind_state(p);
    return POET_OK;
}

void poet_reset(poet_prog *p)
{
    if (p && p->where)
        rewind_state(p);
}

int poet_step(poet_prog *p, const poet_callbacks *cb, void *user, poet_instr *out)
{
    poet_instr tmp;
    if (!p || !p->where)
        return POET_E_ARG;
    /* Overlap was checked by the dry run in poet_open; skip the O(n) scan here. */
    return exec_one(p, cb, user, out ? out : &tmp, 0);
}

int poet_run(poet_prog *p, const poet_callbacks *cb, void *user)
{
    int rc;
    while ((rc = poet_step(p, cb, user, NULL)) == POET_OK) {
    }
    return rc == POET_DONE ? POET_OK : rc;
}

uint32_t poet_n_nodes(const poet_prog *p) { return p->n_nodes; }
uint32_t poet_n_instructions(const poet_prog *p) { return p->n_instr; }
uint64_t poet_arena_bytes(const poet_prog *p) { return p->arena_bytes; }
uint32_t poet_pc(const poet_prog *p) { return p->index; }

int poet_node_table(const poet_prog *p, uint32_t *pos)
{
    uint32_t at, k, first, imm, v;
    if (!p || !pos || !(p->buf[5] & POET_F_NODE_TABLE))
        return 0;
    /* Skip the (validated) instructions by their syntax alone: no state needed. */
    at = p->code;
    for (k = 0; k < p->n_instr; k++) {
        first = p->buf[at++];
        (void)rd_imm(p, &at, first, &imm);
        switch (first & 7u) {
        case C_SEQ:
        case C_NEW:
            v = imm;
            break;
        case C_X:
        case C_PAGE_IN:
            v = var_at(p, &at);
            break;
        case C_FENCE: /* a nonzero immediate: a MOVE (version 4), with a place */
            v = imm ? var_at(p, &at) : 1u;
            break;
        default:
            v = 1u;
            break;
        }
        if (v == 0u)
            (void)var_at(p, &at); /* explicit offset-table slot */
    }
    *pos = at;
    return 1;
}

const char *poet_strerror(int status)
{
    static const char *const names[] = {
        "POET_OK", "POET_E_ARG", "POET_E_TRUNCATED", "POET_E_MAGIC", "POET_E_VERSION", "POET_E_FLAGS",
        "POET_E_LENGTH", "POET_E_CRC", "POET_E_MALFORMED", "POET_E_COUNT", "POET_E_OPCODE", "POET_E_NODE",
        "POET_E_OFFSET", "POET_E_STATE", "POET_E_OVERLAP", "POET_E_NOT_EXECUTABLE", "POET_E_RESOURCES",
        "POET_E_CALLBACK"};
    if (status == POET_DONE)
        return "POET_DONE";
    if (status <= 0 && status >= POET_E_CALLBACK)
        return names[-status];
    return "POET_E_UNKNOWN";
}
