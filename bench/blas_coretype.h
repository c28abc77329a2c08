/* bench/blas_coretype.h: run ember's own tools (benchmarks, examples) with OpenBLAS on the right
 * core type.
 *
 * Why: Debian's OpenBLAS 0.3.21 does not recognise recent Xeons (e.g. family 6 model 207) and
 * silently falls back to its oldest x86-64 kernels ("Prescott", SSE3): sgemm runs 5-7x slower
 * than with OPENBLAS_CORETYPE=SkylakeX. OpenBLAS picks its core when the library is loaded,
 * before main() runs, so setting the variable from inside the program is too late: the tool sets
 * it and re-executes itself once.
 *
 * Rules: a value of OPENBLAS_CORETYPE already in the environment always wins (even an empty one);
 * nothing happens when OpenBLAS already runs an AVX-512 core (SkylakeX, Cooperlake,
 * SapphireRapids) or the CPU lacks AVX-512 (F, BW, VL, DQ); if the re-exec fails the tool
 * carries on with what OpenBLAS picked. The library itself never does this: an embedding program
 * decides its own environment (README.md, "OpenBLAS core type"). */
#ifndef EMBER_BENCH_BLAS_CORETYPE_H
#define EMBER_BENCH_BLAS_CORETYPE_H

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

/* The core type this CPU should run, or NULL when OpenBLAS's own choice is fine. */
static inline const char *ember_tool_wanted_coretype(const char *current_core) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
        if (current_core && strcasecmp(current_core, avx512_cores[i]) == 0)
            return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
#else
    (void)current_core;
#endif
    return NULL;
}

/* Benchmarks that interleave rows on a machine of few cores: a library whose idle threads keep
 * spinning long after its call slows the row after it. Give OpenBLAS (2^4 cycles) and OpenMP /
 * oneDNN (1000 spins) short idle spins, as ember's pool has (10 us by default,
 * ember_options.cpu_spin_us; libgomp's spin is a load and a pause an iteration, 1000 of them about
 * 11 us on the development VM, where ember's pool spun 1000 pauses until 2026-11-30), unless the
 * caller chose. Until 2026-11-30 OpenMP got 20000 spins: its worker then burned 0.9 ms of CPU
 * after every oneDNN call (schedstat of the thread, 2-vCPU VM) against ember's worker's ~11 us
 * (a pause takes 11 ns there), and shared a CPU with the next row's threads for that long;
 * bench_qgemm, two alternations each, e_q8 at 8 x 4096^2 402 / 422 -> 559 / 559 GOPS and oneDNN's
 * reordered row 293 / 315 -> 414 / 378 (both gain: either can follow the other), the large shapes
 * within the noise. Both are read when the libraries load: returns 1 when it set a variable (the
 * tool must re-execute itself for it to take effect), else 0. */
static inline int ember_tool_short_spins(void) {
    int set = 0;
    if (!getenv("OPENBLAS_THREAD_TIMEOUT"))
        set = !setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    if (!getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY"))
        set = !setenv("GOMP_SPINCOUNT", "1000", 1) || set;
    return set;
}

/* Call first thing in main(), with main's argv and the core OpenBLAS runs now
 * (openblas_get_corename(), or ember_device_info.blas_core). Returns only when no re-exec was
 * needed or it failed. */
static inline void ember_tool_blas_coretype(char **argv, const char *current_core) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("EMBER_TOOL_REEXEC"))
        return;
    const char *core = ember_tool_wanted_coretype(current_core);
    if (!core)
        return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("EMBER_TOOL_REEXEC", "1", 1); /* never loop */
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "note: could not re-run with OPENBLAS_CORETYPE=%s; OpenBLAS stays on %s\n",
            core, current_core ? current_core : "its own choice");
}

/* For the benchmarks that interleave rows: short idle spins (ember_tool_short_spins) and OpenBLAS's
 * core type (ember_tool_blas_coretype), each unless the caller set it, with at most one
 * re-execution for both. Call first thing in main(). */
static inline void ember_tool_bench_env(char **argv, const char *current_core) {
    int respawn = ember_tool_short_spins();
    ember_tool_blas_coretype(argv, current_core); /* re-executes itself when it sets the core */
    if (respawn) {
        fflush(NULL);
        execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
    }
}

#endif
