/* tests/test_cpu_spin.c: the CPU pool's idle spin (ember_options.cpu_spin_us, EMBER_CPU_SPIN_US;
 * backends/cpu/threadpool.c).
 *
 * Checks: the default is EMBER_CPU_SPIN_US_DEFAULT and the variable sets it when the option is -1
 * (the option wins); 0 makes an idle worker sleep at once after a call (the pool's sleep count
 * grows) and a long spin keeps it polling (the count stays put) while results are unchanged;
 * destroying a context whose worker is in a long spin returns at once (the stop wakes it); bad
 * settings fail context creation with INVALID_ARGUMENT and a detail, and leave *out NULL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_backend.h"
#include "test_util.h"

static ember_context *ctx_spin(long long spin_us) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 2;
    o.cpu_spin_us = spin_us;
    ember_context *c = NULL;
    TU_OK(ember_context_create(&o, &c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c); /* e.g. a bad EMBER_CPU_MAX_ISA in the environment */
    return c;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void count_task(void *arg, int64_t t, int thread) {
    (void)t;
    (void)thread;
    __atomic_fetch_add((int *)arg, 1, __ATOMIC_RELAXED);
}

/* one parallel call of 64 tasks; every task ran once */
static void one_call(ember__cpu_state *s) {
    int done = 0;
    ember__cpu_parallel_for(s, 64, count_task, &done);
    CU_ASSERT_EQUAL(done, 64);
}

/* the pool's sleep count once it has grown past `than`, or what it is after `limit` seconds */
static long long sleeps_after(ember__cpu_state *s, long long than, double limit) {
    const double t0 = now_s();
    long long n;
    while ((n = ember__cpu_pool_sleeps(s)) <= than && now_s() - t0 < limit)
        sleep_ms(1);
    return n;
}

static void test_settings_resolve(void) {
    ember_context *c = ctx_spin(-1);
    CU_ASSERT_EQUAL(ember__cpu_state_of(c)->spin_us, EMBER_CPU_SPIN_US_DEFAULT);
    ember_context_destroy(c);
    setenv("EMBER_CPU_SPIN_US", "250", 1);
    c = ctx_spin(-1);
    CU_ASSERT_EQUAL(ember__cpu_state_of(c)->spin_us, 250);
    ember_context_destroy(c);
    c = ctx_spin(0); /* the option wins over the variable */
    CU_ASSERT_EQUAL(ember__cpu_state_of(c)->spin_us, 0);
    ember_context_destroy(c);
    setenv("EMBER_CPU_SPIN_US", "", 1); /* empty: unset */
    c = ctx_spin(-1);
    CU_ASSERT_EQUAL(ember__cpu_state_of(c)->spin_us, EMBER_CPU_SPIN_US_DEFAULT);
    ember_context_destroy(c);
    unsetenv("EMBER_CPU_SPIN_US");
    c = ctx_spin(EMBER_CPU_SPIN_US_MAX);
    CU_ASSERT_EQUAL(ember__cpu_state_of(c)->spin_us, EMBER_CPU_SPIN_US_MAX);
    ember_context_destroy(c);
}

static void test_zero_sleeps_at_once(void) {
    ember_context *c = ctx_spin(0);
    ember__cpu_state *s = ember__cpu_state_of(c);
    /* the worker's first sleep, before any call; then asleep again soon after a call (a spin of
     * even 0.5 s would fail this) */
    const long long before = sleeps_after(s, 0, 10.0);
    CU_ASSERT(before >= 1);
    one_call(s);
    CU_ASSERT(sleeps_after(s, before, 0.5) > before);
    ember_context_destroy(c);
}

static void test_long_spin_keeps_polling(void) {
    ember_context *c = ctx_spin(EMBER_CPU_SPIN_US_MAX); /* 1 s */
    ember__cpu_state *s = ember__cpu_state_of(c);
    one_call(s);
    const long long before = ember__cpu_pool_sleeps(s);
    sleep_ms(50); /* well inside the spin: the worker is still polling */
    one_call(s);
    sleep_ms(50);
    CU_ASSERT_EQUAL(ember__cpu_pool_sleeps(s), before);
    /* destroying the context stops the spinning worker at once */
    const double t0 = now_s();
    ember_context_destroy(c);
    CU_ASSERT(now_s() - t0 < 0.5);
}

static void test_same_bits(void) {
    const long long spins[2] = {0, 200000};
    tu_q8_same_bits(ctx_spin, spins, 5, 320, 200);
}

static void test_bad_settings(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    const long long bad_opt[] = {-2, EMBER_CPU_SPIN_US_MAX + 1LL, -1000000000000LL};
    for (size_t i = 0; i < sizeof bad_opt / sizeof bad_opt[0]; i++) {
        o.cpu_spin_us = bad_opt[i];
        ember_context *c = (ember_context *)(uintptr_t)0x1;
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT, "cpu_spin_us");
        CU_ASSERT_PTR_NULL(c);
    }
    o.cpu_spin_us = -1;
    const char *bad_env[] = {"fast", "-5", "1000001", "10us", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) {
        setenv("EMBER_CPU_SPIN_US", bad_env[i], 1);
        ember_context *c = (ember_context *)(uintptr_t)0x1;
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                         "EMBER_CPU_SPIN_US=");
        CU_ASSERT_PTR_NULL(c);
    }
    unsetenv("EMBER_CPU_SPIN_US");
}

static CU_TestInfo spin_tests[] = {
    {"default, variable, option over variable", test_settings_resolve},
    {"0: the worker sleeps after each call", test_zero_sleeps_at_once},
    {"1 s: the worker keeps polling; destroy stops it", test_long_spin_keeps_polling},
    {"q_matmul: the same bits with and without spin", test_same_bits},
    {"bad settings fail context creation", test_bad_settings},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cpu spin", NULL, NULL, NULL, NULL, spin_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_cpu_spin", suites); }
