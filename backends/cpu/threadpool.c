/* backends/cpu/threadpool.c: a persistent pthread pool per context behind ember__cpu_parallel_for.
 *
 * cpu_init starts num_threads - 1 workers (ember__cpu_pool_start); cpu_shutdown joins them
 * (ember__cpu_pool_stop). A parallel_for publishes a pointer to the job (on the caller's stack),
 * bumps the generation and wakes the workers; tasks are handed out through an atomic counter and
 * the calling thread takes part. When every task is claimed the caller withdraws the pointer and
 * waits only for the workers inside the job (`active`): a worker counts itself in before it loads
 * the pointer, so one that wakes late finds no job and never holds the caller up (waking a sleeping
 * vCPU can take longer than a decode-sized product). Idle workers poll the generation for the
 * context's spin time (ember_options.cpu_spin_us, 10 us by default) and then sleep on a condition
 * variable. One job runs at a time: a call made while the pool is busy (another application
 * thread on the same context) runs its tasks inline on the calling thread, which is always
 * correct. Without a pool (start failed or one thread) every call runs inline. */
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "cpu_backend.h"
#include "qgemm.h"

#define POOL_MAX 256
/* An idle worker polls the generation for the context's spin time (ember_options.cpu_spin_us,
 * 10 us by default: short, because other libraries share the cores), reading the clock every
 * SPIN_CHECK pauses, then sleeps on the condition variable. Waking a sleeping worker costs the
 * next call 15-70 us on the 2-vCPU development VM (a cross-CPU futex wake of a halted vCPU); a
 * longer spin trades a busy CPU after each call for that (bench/bench_decode.c). */
#define SPIN_CHECK 16
/* pauses a waiting thread spins (ember__cpu_wait_step) before it yields its CPU between checks */
#define WAIT_SPIN_ITERS 1000

typedef struct pool pool;
typedef struct worker_ctx {
    pool *p;
    int thread;
} worker_ctx;

struct pool {
    pthread_mutex_t mu, busy;
    pthread_cond_t wake;
    pthread_t th[POOL_MAX];
    worker_ctx wc[POOL_MAX]; /* each worker's start argument (no allocation the worker frees:
                                the allocator's live count must not move behind the caller) */
    int nworkers;
    int pinned;           /* workers created pinned to one CPU */
    int cpu_of[POOL_MAX]; /* a pinned worker's CPU (under busy once the pool runs) */
    cpu_set_t allowed;    /* the process's mask when the pool started (pinned pools) */
    atomic_int stop;   /* set under mu; read by workers outside it too (after a generation bump) */
    ember__qtier tier; /* the int8 tier of this context */
    /* one reusable scratch region for the kernels' per-call buffers (packed A, row sums): fresh
     * large allocations are mmap'd and page-faulted on every call, which costs more than a small
     * matmul itself */
    pthread_mutex_t scratch_mu;
    void *scratch;        /* the region (a mapping of its own from EMBER__SCRATCH_HUGE bytes) */
    size_t scratch_bytes; /* its size as asked (0: none) */
    uint64_t spin_ns;     /* an idle worker polls this long before it sleeps */
    atomic_llong sleeps;  /* times a worker went to sleep (tests read it) */
    atomic_llong jobs;    /* parallel_for calls handed to the workers (tests read it) */
    atomic_uint gen;      /* bumped per job (wakes the workers) */
    atomic_int active;    /* workers inside the current job */
    _Atomic(struct job *) job; /* the open job, NULL between jobs */
};

static void scratch_free(pool *p); /* below, beside the scratch region's allocation */

typedef struct job {
    ember__task_fn fn;
    void *arg;
    int64_t n;
    atomic_llong next;
} job;

static void run_tasks(job *j, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->n)
            return;
        j->fn(j->arg, t, thread);
    }
}

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *v) {
    const worker_ctx *w = v;
    pool *p = w->p;
    const int thread = w->thread;
    unsigned seen = 0; /* the generation at start: jobs may be published before this thread runs */
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g == seen && p->spin_ns > 0) {
            const uint64_t t0 = mono_ns();
            for (unsigned n = 1;; n++) {
                cpu_pause();
                if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen ||
                    (n % SPIN_CHECK == 0 && mono_ns() - t0 >= p->spin_ns))
                    break;
            }
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                   !atomic_load_explicit(&p->stop, memory_order_acquire))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (g == seen) /* stop */
            return NULL;
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        /* count in first, then look: the caller withdraws the job before it reads `active` */
        atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
        job *j = atomic_load_explicit(&p->job, memory_order_seq_cst);
        if (j)
            run_tasks(j, thread);
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_release);
    }
}

/* the set of CPU c alone */
static cpu_set_t one_cpu(size_t c) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    return one;
}

/* Thread attributes that pin a new thread to the n-th CPU (from 0) of `allowed` (its number in
 * *cpu); 0 when that cannot be set up (then the thread is made without them). */
static int pin_attr(const cpu_set_t *allowed, int n, pthread_attr_t *attr, int *cpu) {
    int k = 0;
    for (size_t c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, allowed) || k++ != n)
            continue;
        *cpu = (int)c;
        const cpu_set_t one = one_cpu(c);
        if (pthread_attr_init(attr) != 0)
            return 0;
        if (pthread_attr_setaffinity_np(attr, sizeof one, &one) != 0) {
            pthread_attr_destroy(attr);
            return 0;
        }
        return 1;
    }
    return 0;
}

ember_status ember__cpu_pool_start(ember__cpu_state *s) {
    int nw = s->num_threads - 1;
    if (nw > POOL_MAX)
        nw = POOL_MAX;
    s->kernels = NULL;
    if (nw < 0)
        nw = 0;
    pool *p = ember__calloc(1, sizeof *p);
    EMBER_FAIL_IF(!p, EMBER_ERR_OUT_OF_MEMORY, "cpu backend: no memory for the thread pool");
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->busy, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_mutex_init(&p->scratch_mu, NULL);
    p->spin_ns = (uint64_t)s->spin_us * 1000u;
    atomic_init(&p->sleeps, 0);
    atomic_init(&p->jobs, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->job, NULL);
    p->tier = ember__qtier_select(s->max_isa);
    /* worker i runs on the i-th CPU of the process's mask when there are CPUs for every thread
     * (cpu_pin_threads; the first CPU is left to the calling thread, which is never pinned) */
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const int pin = s->pin_threads && sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
                    CPU_COUNT(&allowed) >= s->num_threads;
    for (int i = 0; i < nw; i++) {
        p->wc[i].p = p;
        p->wc[i].thread = i + 1;
        pthread_attr_t attr;
        int pinned = pin && pin_attr(&allowed, i + 1, &attr, &p->cpu_of[i]);
        int rc = pthread_create(&p->th[i], pinned ? &attr : NULL, worker_main, &p->wc[i]);
        if (pinned) {
            pthread_attr_destroy(&attr);
            if (rc != 0) { /* the CPU was refused: the worker runs where the scheduler puts it */
                pinned = 0;
                rc = pthread_create(&p->th[i], NULL, worker_main, &p->wc[i]);
            }
        }
        if (rc != 0)
            break;
        if (!pinned)
            p->cpu_of[i] = -1;
        p->nworkers = i + 1;
        p->pinned += pinned;
    }
    if (p->pinned)
        p->allowed = allowed;
    s->kernels = p;
    return EMBER_OK;
}

/* Keep the calling thread's CPU free of pinned workers. The workers were pinned beside the CPU
 * the caller was expected on, but the caller is never pinned and the scheduler moves it: on a
 * worker's CPU, the woken worker and the caller share that CPU while another stands idle, and
 * one of them ran a whole call alone (2-vCPU VM, 1024^3 q_matmul, calls back to back: 700-800 us
 * with the caller on the worker's CPU against 420-520 us beside it). That worker moves to a CPU
 * of the mask no worker holds (there is one: the pool is pinned only with a CPU for every
 * thread). Called under busy; one getcpu a call, a syscall only when the caller has moved. */
static void pool_avoid_caller(pool *p) {
    if (!p->pinned)
        return;
    const int here = sched_getcpu();
    int w = -1;
    for (int i = 0; i < p->nworkers && here >= 0 && w < 0; i++)
        if (p->cpu_of[i] == here)
            w = i;
    if (w < 0)
        return;
    cpu_set_t held; /* the workers' CPUs */
    CPU_ZERO(&held);
    for (int i = 0; i < p->nworkers; i++)
        if (p->cpu_of[i] >= 0)
            CPU_SET((size_t)p->cpu_of[i], &held);
    for (size_t c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &p->allowed) || CPU_ISSET(c, &held))
            continue;
        const cpu_set_t one = one_cpu(c);
        if (pthread_setaffinity_np(p->th[w], sizeof one, &one) == 0)
            p->cpu_of[w] = (int)c;
        return;
    }
}

int ember__cpu_pool_pinned(const ember__cpu_state *s) {
    const pool *p = s ? s->kernels : NULL;
    return p ? p->pinned : 0;
}

long long ember__cpu_pool_sleeps(const ember__cpu_state *s) {
    pool *p = s ? s->kernels : NULL;
    return p ? atomic_load_explicit(&p->sleeps, memory_order_relaxed) : 0;
}

int ember__cpu_serial_off = 0;

int ember__cpu_small_work(double one_thread_s, double bytes) {
    return !ember__cpu_serial_off && one_thread_s <= 15e-6 && bytes <= 256.0 * 1024;
}

long long ember__cpu_pool_jobs(const ember__cpu_state *s) {
    pool *p = s ? s->kernels : NULL;
    return p ? atomic_load_explicit(&p->jobs, memory_order_relaxed) : 0;
}

void ember__cpu_pool_stop(ember__cpu_state *s) {
    pool *p = s ? s->kernels : NULL;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->scratch_mu);
    scratch_free(p);
    pthread_mutex_destroy(&p->busy);
    ember__free(p);
    s->kernels = NULL;
}

static void run_inline(int64_t n_tasks, ember__task_fn fn, void *arg) {
    for (int64_t t = 0; t < n_tasks; t++)
        fn(arg, t, 0);
}

void ember__cpu_parallel_for(ember__cpu_state *s, int64_t n_tasks, ember__task_fn fn, void *arg) {
    pool *p = s ? s->kernels : NULL;
    if (n_tasks <= 1 || !p || p->nworkers == 0 || pthread_mutex_trylock(&p->busy) != 0) {
        run_inline(n_tasks, fn, arg);
        return;
    }
    atomic_fetch_add_explicit(&p->jobs, 1, memory_order_relaxed);
    pool_avoid_caller(p);
    job j = {.fn = fn, .arg = arg, .n = n_tasks};
    atomic_init(&j.next, 0);
    atomic_store_explicit(&p->job, &j, memory_order_seq_cst);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(&j, 0);
    /* every task is claimed: close the job, then wait for the workers still inside it */
    atomic_store_explicit(&p->job, NULL, memory_order_seq_cst);
    int spins = 0;
    while (atomic_load_explicit(&p->active, memory_order_seq_cst) > 0)
        ember__cpu_wait_step(&spins);
    pthread_mutex_unlock(&p->busy);
}

void ember__cpu_wait_step(int *spins) {
    if (*spins >= WAIT_SPIN_ITERS) {
        sched_yield();
        return;
    }
    ++*spins;
    cpu_pause();
}

/* A scratch region of `bytes`: below EMBER__SCRATCH_HUGE 64-byte aligned heap memory; from there a
 * mapping of its own (ember__map_huge) of whole 2 MiB pages, 2 MiB-aligned and advised huge, so
 * that the packed A that fills most of it (and the tasks' sums) take one TLB entry per 2 MiB: the
 * tile loads of a task walk up to 1 MiB of packed A once per 32-column panel. The memory in use
 * rounds up to whole 2 MiB pages. Measured with the region placed on a 2 MiB boundary inside a
 * heap allocation (bench_qgemm --shape, 2 threads, e_q8 GOPS medians): through an environment
 * switch in one build (three sets of 4-5 alternations, orders rotated) 4096^3 4779 -> 4996, 4624
 * -> 4859, 4801 -> 4911; 512 x 4096^2 3712 -> 3998; 2048^3 4716 -> 4871, 4985 -> 4974; 1024^3
 * level. Then the build before and that one as two binaries, alternated (13 and 13 at 4096^3, 8
 * and 8 elsewhere): 4096^3 4689 -> 4838, 512 x 4096^2 and 2048^3 level. A 1.5 MiB region (128 x
 * 4096^2) on huge pages read level or lower, hence the threshold. The mapping, against that heap
 * placement (six full-table pairs): 2048^3 4453 / 4499, 4096^3 4490 / 4360, 512 x 4096^2 3751 /
 * 3730: level, and the same mechanism as the packs' values (qgemm.c). */
static size_t scratch_map_len(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    size_t len;
    return ember__add_size(bytes, huge - 1, &len) ? len & ~(huge - 1) : 0;
}

static void *scratch_alloc(size_t bytes) {
    if (bytes < EMBER__SCRATCH_HUGE)
        return ember__aligned_alloc(bytes);
    const size_t len = scratch_map_len(bytes);
    return len ? ember__map_huge(len) : NULL;
}

/* The pool's scratch region freed (scratch_mu held, or the pool stopping) */
static void scratch_free(pool *p) {
    if (p->scratch_bytes >= EMBER__SCRATCH_HUGE)
        ember__map_free(p->scratch, scratch_map_len(p->scratch_bytes));
    else
        ember__aligned_free(p->scratch);
    p->scratch = NULL;
    p->scratch_bytes = 0;
}

void *ember__cpu_scratch_get(ember__cpu_state *s, size_t bytes) {
    pool *p = s ? s->kernels : NULL;
    if (!p || pthread_mutex_trylock(&p->scratch_mu) != 0)
        return NULL;
    if (p->scratch_bytes < bytes) {
        scratch_free(p);
        p->scratch = scratch_alloc(bytes);
        p->scratch_bytes = p->scratch ? bytes : 0;
    }
    if (!p->scratch) {
        pthread_mutex_unlock(&p->scratch_mu);
        return NULL;
    }
    return p->scratch;
}

void ember__cpu_scratch_put(ember__cpu_state *s) {
    pool *p = s->kernels;
    pthread_mutex_unlock(&p->scratch_mu);
}

void ember__cpu_scratch_release(ember__cpu_state *s) {
    pool *p = s ? s->kernels : NULL;
    if (!p || pthread_mutex_trylock(&p->scratch_mu) != 0)
        return;
    scratch_free(p);
    pthread_mutex_unlock(&p->scratch_mu);
}

ember__qtier ember__cpu_tier(const ember__cpu_state *s) {
    const pool *p = s ? s->kernels : NULL;
    return p ? p->tier : EMBER__QT_SCALAR;
}

ember__cpu_state *ember__cpu_state_of(const ember_context *ctx) {
    return (ember__cpu_state *)ctx->be[EMBER_BACKEND_CPU].state;
}
