/* open_check.c - poet_open on a real 32-bit target (Cortex-M4 under qemu, size_t and
 * where words of 32 bits): reads check.poet through semihosting, opens it over a
 * 64 KiB arena and prints one line:
 *
 *   open_check: status=<poet_open's code> arena_bytes=<poet_arena_bytes> n_nodes=<n>
 *               max_arena=<POET_MAX_ARENA> where_bytes=<sizeof(poet_where_t)> run=<code>
 *
 * run= is poet_run's status with no callbacks when the open succeeded, else "-".
 * Built and run by tests/runtime/test_wide_arena.py. */
#include "poet_platform.h"
#include "poet_runtime.h"

static uint8_t file[4096];
static uint8_t arena[65536];
static poet_where_t where[256];

static char *put_s(char *p, const char *s)
{
    while (*s) *p++ = *s++;
    return p;
}

static char *put_u(char *p, uint64_t v)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v);
    while (k) *p++ = d[--k];
    return p;
}

int main(void)
{
    char line[256], *p = line;
    uint32_t len = 0;
    poet_prog prog;
    int h, rc;
    plat_init();
    h = plat_open("check.poet", PLAT_READ);
    if (h < 0) {
        plat_puts("open_check: cannot open check.poet");
        return 1;
    }
    while (len < sizeof file && plat_read(h, file + len, 1u) == 0)
        len++;
    plat_close(h);
    rc = poet_open(&prog, file, len, arena, sizeof arena, where, sizeof where / sizeof *where);
    p = put_s(p, "open_check: status=");
    p = put_s(p, poet_strerror(rc));
    p = put_s(p, " arena_bytes=");
    p = put_u(p, poet_arena_bytes(&prog));
    p = put_s(p, " n_nodes=");
    p = put_u(p, poet_n_nodes(&prog));
    p = put_s(p, " max_arena=");
    p = put_u(p, POET_MAX_ARENA);
    p = put_s(p, " where_bytes=");
    p = put_u(p, sizeof(poet_where_t));
    p = put_s(p, " run=");
    p = put_s(p, rc == POET_OK ? poet_strerror(poet_run(&prog, NULL, NULL)) : "-");
    *p = '\0';
    plat_puts(line);
    return 0;
}
