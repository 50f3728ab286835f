/*
 * poet_text.h - append text and numbers to a line buffer, for the drivers' one-line
 * reports (no printf on the device: newlib's pulls in ~20 KiB and a heap).
 * Each function writes at p and returns the position after what it wrote; the caller
 * sizes the buffer and adds the terminating '\0'.
 */
#ifndef POET_TEXT_H
#define POET_TEXT_H

#include <stdint.h>

static inline char *put_s(char *p, const char *s)
{
    while (*s) *p++ = *s++;
    return p;
}

static inline char *put_u(char *p, uint64_t v)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v);
    while (n) *p++ = digits[--n];
    return p;
}

static inline char *put_i(char *p, int v)
{
    if (v < 0) {
        *p++ = '-';
        return put_u(p, (uint64_t)(-(int64_t)v));
    }
    return put_u(p, (uint64_t)v);
}

/* A float with six decimals, rounded (|v| < 2^32; NaN and larger print as "nan"/"big").
 * For reading only: exact values go to files. */
static inline char *put_f6(char *p, float v)
{
    if (v != v) return put_s(p, "nan");
    if (v < 0.0f) {
        *p++ = '-';
        v = -v;
    }
    if (v >= 4294967295.0f) return put_s(p, "big");
    uint64_t micros = (uint64_t)((double)v * 1e6 + 0.5);
    p = put_u(p, micros / 1000000u);
    *p++ = '.';
    uint64_t frac = micros % 1000000u;
    for (uint64_t d = 100000u; d; d /= 10u) *p++ = (char)('0' + (int)(frac / d % 10u));
    return p;
}

#endif
