/* calibrate.c - check the tick -> instruction conversion of the emulated board.
 *
 * Runs a loop of exactly 2 * N Thumb instructions (SUBS + BNE per iteration) between
 * two timer readings, for N = 1,000,000 and 4,000,000, and prints the ticks of each.
 * Under qemu -icount shift=S the expected figure is 2N * 2^S ns * 25 MHz; the
 * difference of the two runs cancels the fixed cost of reading the timer. */
#include "poet_platform.h"

static uint32_t spin(uint32_t n)
{
    uint32_t t0 = plat_ticks();
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    return plat_ticks() - t0;
}

static char *put_u(char *p, uint32_t v)
{
    char d[12];
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
    plat_init();
    char line[64], *p = line;
    const char *head = "calibrate: ticks_1M=";
    while (*head) *p++ = *head++;
    p = put_u(p, spin(1000000u));
    const char *mid = " ticks_4M=";
    while (*mid) *p++ = *mid++;
    p = put_u(p, spin(4000000u));
    *p = '\0';
    plat_puts(line);
    return 0;
}
