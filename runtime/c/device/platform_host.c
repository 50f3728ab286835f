/* platform_host.c - the board interface on a host: stdio files, no timer. */
#include <stdio.h>
#include <stdlib.h>

#include "poet_platform.h"

#define MAX_FILES 8
static FILE *files[MAX_FILES];

void plat_init(void) {}

int plat_open(const char *name, int mode)
{
    static const char *modes[] = {"rb", "wb", "w+b"};
    for (int h = 0; h < MAX_FILES; h++) {
        if (files[h] == NULL) {
            files[h] = fopen(name, modes[mode]);
            return files[h] ? h : -1;
        }
    }
    return -1;
}

int plat_read(int h, void *buf, uint32_t len) { return fread(buf, 1, len, files[h]) != len; }
int plat_write(int h, const void *buf, uint32_t len) { return fwrite(buf, 1, len, files[h]) != len; }
int plat_seek(int h, uint32_t pos) { return fseek(files[h], (long)pos, SEEK_SET) != 0; }

void plat_close(int h)
{
    fclose(files[h]);
    files[h] = NULL;
}

void plat_puts(const char *s) { puts(s); fflush(stdout); }
uint32_t plat_ticks(void) { return 0u; }
uint32_t plat_stack_used(void) { return 0u; }
void plat_exit(int code) { exit(code); }
