/* A small thread pool for the CPU kernels: the caller and threads-1 workers share each job's tasks.

   Why not OpenMP: torch ships its own libgomp, and a second OpenMP runtime in the same process would keep a
   second team of threads spinning against torch's. Here workers wait for the next job yielding the core
   (sched_yield) for a short while (a decode step calls a matmul every few hundred microseconds), then sleep on
   a condition variable. Yielding, not busy-waiting, matters: between two matmuls torch runs its own ops on its
   own threads, and a worker that spun on a core torch wanted held it for a whole scheduler slice (measured: a
   0.1 ms attention call took 6.5 ms).

   A job is published as one 64-bit word, generation << 32 | next task. A worker claims task i of generation g
   by a compare-and-swap from (g, i) to (g, i + 1). The job's fields (fn, ctx, ntasks) are read as a seqlock's
   data: the caller first closes the word (a new generation whose next task is CLOSED, so nothing can be claimed),
   then writes the fields, then opens the next generation; a worker reads the fields and then the word again, and
   claims only if the generation is still the one it saw. Without the closed phase a worker that woke late could
   read the next job's ntasks while the word still named the finished job, claim a task past its end and count it
   as done for the next job, which then returned while one of its tasks still ran (seen: 1 in ~500k jobs).
*/
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "lexi_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERATIONS 2000 /* yields (~1 us each when nothing else wants the core) before a worker sleeps */
#define CLOSED 0xffffffffu   /* the next-task half of a word whose fields are being written: nothing to claim */

typedef void (*task_fn)(void *, int, int);

struct pool {
    int threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int sleeping; /* under mu */
    int stop;     /* under mu */
    _Atomic uint64_t job;
    _Atomic int done;
    _Atomic(task_fn) fn; /* the seqlock's data: written between the closed and the open word */
    _Atomic(void *) ctx;
    _Atomic int ntasks;
};

typedef struct {
    pool *p;
    int index;
} worker_arg;

/* Claim and run tasks of generation `gen` until none is left or the job moved on. */
static void run_tasks(pool *p, uint32_t gen, int index) {
    task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    uint32_t ntasks = (uint32_t)atomic_load_explicit(&p->ntasks, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire); /* the fields were read before the word is read again */
    uint64_t cur = atomic_load_explicit(&p->job, memory_order_relaxed);
    for (;;) {
        if ((uint32_t)(cur >> 32) != gen || (uint32_t)cur >= ntasks) return; /* moved on, closed or all claimed */
        if (atomic_compare_exchange_weak_explicit(&p->job, &cur, cur + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            fn(ctx, (int)(uint32_t)cur, index);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
            cur = atomic_load_explicit(&p->job, memory_order_acquire);
        }
    }
}

static void *worker_main(void *arg) {
    worker_arg *w = arg;
    pool *p = w->p;
    int index = w->index;
    free(w);
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = seen;
        for (int i = 0; i < SPIN_ITERATIONS; i++) {
            gen = (uint32_t)(atomic_load_explicit(&p->job, memory_order_acquire) >> 32);
            if (gen != seen) break;
            sched_yield();
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mu);
            p->sleeping++;
            while (!p->stop && (gen = (uint32_t)(atomic_load(&p->job) >> 32)) == seen) {
                pthread_cond_wait(&p->wake, &p->mu);
            }
            p->sleeping--;
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = gen;
        run_tasks(p, gen, index);
    }
}

pool *pool_create(int threads) {
    if (threads < 1) threads = 1;
    pool *p = calloc(1, sizeof(pool));
    if (!p) return NULL;
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->job, 0);
    atomic_init(&p->done, 0);
    p->workers = calloc((size_t)threads, sizeof(pthread_t));
    if (!p->workers) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < threads; i++) {
        worker_arg *w = malloc(sizeof(worker_arg));
        if (!w) {
            p->threads = i;
            break;
        }
        w->p = p;
        w->index = i;
        if (pthread_create(&p->workers[i], NULL, worker_main, w) != 0) {
            free(w);
            p->threads = i;
            break;
        }
    }
    return p;
}

void pool_destroy(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->threads; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int pool_threads(const pool *p) { return p->threads; }

void pool_run(pool *p, void (*fn)(void *, int, int), void *ctx, int ntasks) {
    if (ntasks <= 0) return;
    if (p->threads == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(ctx, t, 0);
        return;
    }
    uint32_t gen = (uint32_t)(atomic_load_explicit(&p->job, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&p->job, (uint64_t)gen << 32 | CLOSED, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* the closed word is seen before any of the new fields */
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->ntasks, ntasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    gen++;
    atomic_store_explicit(&p->job, (uint64_t)gen << 32, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleeping) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, gen, 0);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) CPU_RELAX();
}
