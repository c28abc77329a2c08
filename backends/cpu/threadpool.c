/* backends/cpu/threadpool.c: parallel-for over the CPU backend's threads.
 * First version: threads are started per call (correct, not the fastest); the int8 kernels issue
 * replaces this with a persistent pool per context behind the same interface. */
#include <stdatomic.h>

#include "cpu_backend.h"

typedef struct job {
    ember__task_fn fn;
    void *arg;
    int64_t n;
    atomic_llong next;
} job;

typedef struct worker {
    job *j;
    int thread;
} worker;

static void run_tasks(job *j, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&j->next, 1);
        if (t >= j->n)
            return;
        j->fn(j->arg, t, thread);
    }
}

static void *worker_main(void *p) {
    worker *w = p;
    run_tasks(w->j, w->thread);
    return NULL;
}

void ember__cpu_parallel_for(ember__cpu_state *s, int64_t n_tasks, ember__task_fn fn, void *arg) {
    int nt = s ? s->num_threads : 1;
    if (nt > n_tasks)
        nt = (int)n_tasks;
    job j = {.fn = fn, .arg = arg, .n = n_tasks};
    atomic_init(&j.next, 0);
    if (nt <= 1) {
        run_tasks(&j, 0);
        return;
    }
    pthread_t th[64];
    worker w[64];
    if (nt > 64)
        nt = 64;
    int started = 0;
    for (int i = 1; i < nt; i++) {
        w[i].j = &j;
        w[i].thread = i;
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
            break; /* fewer threads: the tasks still all run */
        started = i;
    }
    run_tasks(&j, 0);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
}

ember__cpu_state *ember__cpu_state_of(const ember_context *ctx) {
    return (ember__cpu_state *)ctx->be[EMBER_BACKEND_CPU].state;
}
