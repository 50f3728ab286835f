/* platform_semihost.c - the board interface on a Cortex-M under a debugger or QEMU.
 *
 * Files go through Arm semihosting (BKPT 0xAB): the host's files stand in for the SD
 * card, the batch and the results. Time comes from CMSDK APB timer 0 of the MPS2
 * boards (a 32-bit down-counter at the 25 MHz system clock); under QEMU's -icount the
 * virtual clock advances a fixed 2^shift ns per guest instruction, so timer ticks count
 * instructions deterministically. */
#include "poet_platform.h"

enum { SYS_OPEN = 0x01, SYS_CLOSE = 0x02, SYS_WRITE0 = 0x04, SYS_WRITE = 0x05, SYS_READ = 0x06,
       SYS_SEEK = 0x0A, SYS_EXIT_EXTENDED = 0x20 };
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

#define TIMER0_CTRL (*(volatile uint32_t *)0x40000000u)
#define TIMER0_VALUE (*(volatile uint32_t *)0x40000004u)
#define TIMER0_RELOAD (*(volatile uint32_t *)0x40000008u)

extern uint32_t _stack_bottom, _stack_top; /* linker script */
#define STACK_PAINT 0xC0FFEE00u

static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static uint32_t length(const char *s)
{
    uint32_t n = 0;
    while (s[n]) n++;
    return n;
}

void plat_init(void)
{
    TIMER0_CTRL = 0u;
    TIMER0_RELOAD = 0xFFFFFFFFu;
    TIMER0_VALUE = 0xFFFFFFFFu;
    TIMER0_CTRL = 1u; /* enable, no interrupt */
}

int plat_open(const char *name, int mode)
{
    static const uint32_t modes[] = {1u /* rb */, 5u /* wb */, 7u /* w+b */};
    uint32_t block[3] = {(uint32_t)name, modes[mode], length(name)};
    return semihost(SYS_OPEN, block);
}

int plat_read(int h, void *buf, uint32_t len)
{
    uint32_t block[3] = {(uint32_t)h, (uint32_t)buf, len};
    return semihost(SYS_READ, block) != 0; /* returns the bytes NOT read */
}

int plat_write(int h, const void *buf, uint32_t len)
{
    uint32_t block[3] = {(uint32_t)h, (uint32_t)buf, len};
    return semihost(SYS_WRITE, block) != 0;
}

int plat_seek(int h, uint32_t pos)
{
    uint32_t block[2] = {(uint32_t)h, pos};
    return semihost(SYS_SEEK, block) != 0;
}

void plat_close(int h)
{
    uint32_t block[1] = {(uint32_t)h};
    (void)semihost(SYS_CLOSE, block);
}

void plat_puts(const char *s)
{
    (void)semihost(SYS_WRITE0, s);
    (void)semihost(SYS_WRITE0, "\n");
}

uint32_t plat_ticks(void) { return 0xFFFFFFFFu - TIMER0_VALUE; }

uint32_t plat_stack_used(void)
{
    /* startup_m4.c painted the stack: the lowest word not holding the paint is the high-water mark */
    const uint32_t *p = &_stack_bottom;
    while (p < &_stack_top && *p == STACK_PAINT) p++;
    return (uint32_t)((const uint8_t *)&_stack_top - (const uint8_t *)p);
}

void plat_exit(int code)
{
    uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    for (;;) (void)semihost(SYS_EXIT_EXTENDED, block);
}
