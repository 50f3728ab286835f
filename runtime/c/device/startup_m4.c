/* startup_m4.c - vector table and reset handler for a Cortex-M4F (MPS2 AN386 under QEMU).
 *
 * Reset: copy .data from flash, zero .bss, paint the stack (for plat_stack_used), turn
 * the FPU on where there is one (CPACR: full access to CP10/CP11), call main. The same
 * file starts a Cortex-M3 (MPS2 AN385: the int8 kernels' firmware without FPU or DSP). Faults print one line over
 * semihosting and exit with code 3, so a bad kernel never hangs the emulator. */
#include <stdint.h>

#include "poet_platform.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _stack_bottom, _stack_top;
int main(void);

#define CPACR (*(volatile uint32_t *)0xE000ED88u)
#define STACK_PAINT 0xC0FFEE00u

void Reset_Handler(void);
void Fault_Handler(void);

void Reset_Handler(void)
{
    for (uint32_t *src = &_sidata, *dst = &_sdata; dst < &_edata;) *dst++ = *src++;
    for (uint32_t *dst = &_sbss; dst < &_ebss;) *dst++ = 0u;
    uint32_t sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *p = &_stack_bottom; p < (uint32_t *)sp - 16; p++) *p = STACK_PAINT; /* 64 B below the live frame */
#if defined(__ARM_FP) /* a core without an FPU (Cortex-M3) has no CPACR to set */
    CPACR |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    plat_exit(main());
}

void Fault_Handler(void)
{
    plat_puts("poet-step: fault (hard fault, memory or usage fault)");
    plat_exit(3);
}

/* Initial stack pointer, reset, then NMI .. SysTick: every exception is a fault here. */
__attribute__((section(".isr_vector"), used))
static void (*const vectors[16])(void) = {
    (void (*)(void))(&_stack_top), Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler, 0, 0, 0, 0, Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler,
};
