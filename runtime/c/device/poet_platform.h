/*
 * poet_platform.h - what the training-step driver (poet_main.c) needs from the board.
 *
 * Two implementations: platform_host.c (stdio files, for the host build) and
 * platform_semihost.c (Cortex-M: Arm semihosting files stand in for the SD card, the
 * batch and the results; a CMSDK timer counts time). Files are opened by name; a
 * handle is a small non-negative int, negative on failure.
 */
#ifndef POET_PLATFORM_H
#define POET_PLATFORM_H

#include <stdint.h>

enum plat_mode { PLAT_READ = 0, PLAT_WRITE = 1, PLAT_READ_WRITE = 2 /* created/truncated */ };

void plat_init(void);
int plat_open(const char *name, int mode);
/* 0 when all len bytes moved, nonzero otherwise. */
int plat_read(int h, void *buf, uint32_t len);
int plat_write(int h, const void *buf, uint32_t len);
int plat_seek(int h, uint32_t pos);
void plat_close(int h);
void plat_puts(const char *s);               /* one line of text, newline added */
uint32_t plat_ticks(void);                   /* free-running up-counter (wraps) */
uint32_t plat_stack_used(void);              /* bytes of stack touched so far, 0 if unknown */
void plat_exit(int code);                    /* does not return */

#endif
