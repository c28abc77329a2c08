/* tests/test_cpu_pin.c: pinning the CPU pool's workers (ember_options.cpu_pin_threads,
 * EMBER_CPU_PIN; backends/cpu/threadpool.c).
 *
 * Checks: by default, with at least num_threads CPUs in the process's mask, worker i runs on the
 * mask's i-th CPU (a task run by worker 1 reports the second CPU) while the calling thread is on
 * the first, and a worker whose CPU the calling thread has moved to moves to a CPU no worker holds
 * (the test moves the caller with sched_setaffinity and restores it); the calling thread's own
 * mask is untouched by the library; 0 (option or variable) leaves the workers unpinned, as does a
 * pool with more threads than CPUs; bad settings fail context creation with INVALID_ARGUMENT and a
 * detail; q_matmul gives the same bits pinned and unpinned. On a machine with one CPU the pinned
 * case is reported and skipped (nothing to pin to). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_backend.h"
#include "test_util.h"

static ember_context *ctx_pin(int pin, int threads) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_pin_threads = pin;
    o.num_threads = threads;
    ember_context *c = NULL;
    TU_OK(ember_context_create(&o, &c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c); /* e.g. a bad EMBER_CPU_MAX_ISA in the environment */
    return c;
}

static int cpus_allowed(cpu_set_t *set) {
    CPU_ZERO(set);
    return sched_getaffinity(0, sizeof *set, set) == 0 ? CPU_COUNT(set) : 0;
}

static int nth_cpu(const cpu_set_t *set, int n) {
    int k = 0;
    for (size_t c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && k++ == n)
            return (int)c;
    return -1;
}

/* the calling thread moved to CPU cpu alone (*one: that set); sched_setaffinity's result */
static int move_caller(int cpu, cpu_set_t *one) {
    CPU_ZERO(one);
    CPU_SET((size_t)cpu, one);
    return sched_setaffinity(0, sizeof *one, one);
}

typedef struct probe {
    int cpu[64];
    int thread[64];
} probe;

static void where(void *arg, int64_t t, int thread) {
    probe *p = arg;
    volatile double x = 0; /* long enough for the worker to take a share */
    for (int i = 0; i < 200000; i++)
        x += i;
    p->cpu[t] = sched_getcpu();
    p->thread[t] = thread;
}

/* the CPU worker 1 ran a task on, in rounds of 64 tasks for up to 20 s (under valgrind, which
 * runs one thread at a time, the worker can miss many rounds); -1 if it took none */
static int worker_cpu(ember__cpu_state *s) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int round = 0;; round++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (round >= 50 && now.tv_sec - start.tv_sec > 20)
            break;
        probe p;
        memset(&p, 0xff, sizeof p);
        ember__cpu_parallel_for(s, 64, where, &p);
        for (int t = 0; t < 64; t++)
            if (p.thread[t] == 1)
                return p.cpu[t];
    }
    return -1;
}

static void test_default_pins_workers(void) {
    cpu_set_t before, after, one;
    int n = cpus_allowed(&before);
    if (n < 2) {
        printf("(one CPU in the mask: nothing to pin to) ");
        return;
    }
    ember_context *c = ctx_pin(-1, 2);
    ember__cpu_state *s = ember__cpu_state_of(c);
    CU_ASSERT_EQUAL(ember__cpu_pool_pinned(s), 1);
    cpus_allowed(&after);
    CU_ASSERT(CPU_EQUAL(&before, &after)); /* the caller is never pinned */
    const int first = nth_cpu(&before, 0), second = nth_cpu(&before, 1);
    /* the caller on the mask's first CPU: the worker stays on the second */
    CU_ASSERT_EQUAL_FATAL(move_caller(first, &one), 0);
    CU_ASSERT_EQUAL(worker_cpu(s), second);
    /* the caller moved to the worker's CPU: the worker moves off it, to a CPU no worker holds
     * (the first, with two threads), and stays pinned */
    CU_ASSERT_EQUAL_FATAL(move_caller(second, &one), 0);
    int w = worker_cpu(s);
    CU_ASSERT_NOT_EQUAL(w, second);
    CU_ASSERT(w >= 0 && CPU_ISSET((size_t)w, &before));
    CU_ASSERT_EQUAL(ember__cpu_pool_pinned(s), 1);
    /* and back */
    CU_ASSERT_EQUAL_FATAL(move_caller(first, &one), 0);
    w = worker_cpu(s);
    CU_ASSERT_NOT_EQUAL(w, first);
    CU_ASSERT(w >= 0 && CPU_ISSET((size_t)w, &before));
    /* the library never changed the caller's own mask (only the test did) */
    cpus_allowed(&after);
    CU_ASSERT(CPU_EQUAL(&after, &one));
    CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof before, &before), 0);
    ember_context_destroy(c);
}

static void test_off_and_oversubscribed(void) {
    cpu_set_t set;
    int n = cpus_allowed(&set);
    ember_context *c = ctx_pin(0, 2);
    CU_ASSERT_EQUAL(ember__cpu_pool_pinned(ember__cpu_state_of(c)), 0);
    ember_context_destroy(c);
    c = ctx_pin(1, n + 1); /* more threads than CPUs: nobody is pinned */
    CU_ASSERT_EQUAL(ember__cpu_pool_pinned(ember__cpu_state_of(c)), 0);
    ember_context_destroy(c);
    setenv("EMBER_CPU_PIN", "0", 1);
    c = ctx_pin(-1, 2);
    CU_ASSERT_EQUAL(ember__cpu_pool_pinned(ember__cpu_state_of(c)), 0);
    ember_context_destroy(c);
    if (n >= 2) {
        c = ctx_pin(1, 2); /* the option wins over the variable */
        CU_ASSERT_EQUAL(ember__cpu_pool_pinned(ember__cpu_state_of(c)), 1);
        ember_context_destroy(c);
    }
    unsetenv("EMBER_CPU_PIN");
}

static void test_bad_settings(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *c = (ember_context *)(uintptr_t)0x1;
    o.cpu_pin_threads = 2;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                     "cpu_pin_threads must be -1, 0 or 1, got 2");
    CU_ASSERT_PTR_NULL(c);
    o.cpu_pin_threads = -1;
    const char *bad[] = {"yes", "2", "-1", "01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("EMBER_CPU_PIN", bad[i], 1);
        c = (ember_context *)(uintptr_t)0x1;
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                         "EMBER_CPU_PIN=");
        CU_ASSERT_PTR_NULL(c);
    }
    unsetenv("EMBER_CPU_PIN");
}

/* a context of two threads, pinned or not */
static ember_context *ctx_pin2(long long pin) { return ctx_pin((int)pin, 2); }

static void test_same_bits(void) {
    const long long pins[2] = {0, 1};
    tu_q8_same_bits(ctx_pin2, pins, 37, 320, 200);
}

static CU_TestInfo pin_tests[] = {
    {"by default workers are pinned, off the caller's CPU", test_default_pins_workers},
    {"off, oversubscribed, option over variable", test_off_and_oversubscribed},
    {"bad settings fail context creation", test_bad_settings},
    {"q_matmul: the same bits pinned and unpinned", test_same_bits},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cpu pin", NULL, NULL, NULL, NULL, pin_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_cpu_pin", suites); }
