/*
 * LD_PRELOAD shim that makes an AVX-512 host look like an AVX2-only one to every CPU-feature
 * check in the process: std's is_x86_feature_detected! (and so gemm's and macerator's kernel
 * choice inside burn), torch's cpuinfo, MKL, OpenBLAS.
 *
 * Why: the CPU benchmarks must be measured on AVX2-only hosts too, and on an AVX-512 host the
 * libraries' own switches reach only part of the code (PIPELINE_CPU_LEVEL reaches our kernels,
 * ATEN_CPU_CAPABILITY torch's, but gemm, the matrix products of burn's CPU backend, picks its
 * AVX-512 kernels by itself and has no switch). Linux's CPUID faulting (arch_prctl
 * ARCH_SET_CPUID, Intel CPUs that list `cpuid_fault` in /proc/cpuinfo) makes each CPUID
 * instruction trap; the SIGSEGV handler here executes it with faulting briefly off, clears the
 * AVX-512 (and AMX) bits of what it returns, and resumes after the instruction. Code that
 * uses AVX-512 without asking CPUID would still run it: none of the libraries above does.
 * glibc asks before any preloaded library runs (its memcpy and memset are chosen in the
 * dynamic loader): GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD
 * hides it there (benches/cpu_compare.py --isa avx2 sets both).
 *
 *   gcc -O2 -shared -fPIC -o target/hide_avx512.so benches/hide_avx512.c
 *   LD_PRELOAD=target/hide_avx512.so GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,... \
 *       target/release/pipeline bench train ...
 *
 * The setting is per thread, inherited by threads and forks, reset by execve (so a child
 * program needs LD_PRELOAD in its environment too, which it inherits). If CPUID faulting is
 * not available the shim says so on stderr and changes nothing (HIDE_AVX512_QUIET=1 silences
 * the line that says it is active).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int set_cpuid_faulting(int on) {
    /* ARCH_SET_CPUID's argument is 1 to let CPUID run, 0 to make it fault. */
    return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1);
}

static void real_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* Leaf 7 sub-leaf 0: EBX avx512f 16, dq 17, ifma 21, pf 26, er 27, cd 28, bw 30, vl 31;
 * ECX vbmi 1, vbmi2 6, vnni 11, bitalg 12, vpopcntdq 14; EDX 4vnniw 2, 4fmaps 3,
 * vp2intersect 8, amx-bf16 22, avx512-fp16 23, amx-tile 24, amx-int8 25.
 * Leaf 7 sub-leaf 1: EAX avx512-bf16 5. */
static void hide(unsigned leaf, unsigned sub, unsigned r[4]) {
    if (leaf == 7 && sub == 0) {
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
                  (1u << 30) | (1u << 31));
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) |
                  (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~(1u << 5);
    }
}

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = (ucontext_t *)ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) {
        /* A real fault: let it kill the process as it would have. */
        signal(sig, SIG_DFL);
        return;
    }
    unsigned leaf = (unsigned)g[REG_RAX], sub = (unsigned)g[REG_RCX], r[4];
    set_cpuid_faulting(0);
    real_cpuid(leaf, sub, r);
    set_cpuid_faulting(1);
    hide(leaf, sub, r);
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || set_cpuid_faulting(1) != 0) {
        fprintf(stderr, "hide_avx512: CPUID faulting unavailable here; nothing hidden\n");
        return;
    }
    const char *quiet = getenv("HIDE_AVX512_QUIET");
    if (!quiet || strcmp(quiet, "1") != 0)
        fprintf(stderr, "hide_avx512: AVX-512 hidden from CPUID in pid %d\n", (int)getpid());
}
