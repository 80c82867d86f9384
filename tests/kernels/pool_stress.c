/* Stress for lexi/kernels/cpu/pool.c: many short jobs of changing sizes, each task checked to run exactly once, on
   the job it belongs to, before pool_run returns. Prints "jobs J stale S wrong W"; test_cpu_pool.py runs it.
   A job is freed and scribbled over as soon as pool_run returns, so a task run late or on the wrong job shows. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lexi_cpu.h"

#define MAX_TASKS 64

typedef struct {
    long id;
    int ntasks;
    _Atomic int ran[MAX_TASKS];
} job;

static _Atomic long current;
static _Atomic long stale;

static void task(void *ctx, int index, int thread) {
    (void)thread;
    job *j = ctx;
    if (j->id != atomic_load(&current) || index < 0 || index >= j->ntasks) {
        atomic_fetch_add(&stale, 1);
        return;
    }
    atomic_fetch_add(&j->ran[index], 1);
    for (volatile int i = 0; i < (index % 3) * 50; i++) {
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    pool *p = pool_create(threads);
    long jobs = 0, wrong = 0;
    double end = now() + seconds;
    while ((jobs & 1023) || now() < end) {
        job *j = calloc(1, sizeof(job));
        j->id = jobs;
        j->ntasks = 1 + (int)((jobs * 7) % 33);
        atomic_store(&current, jobs);
        pool_run(p, task, j, j->ntasks);
        for (int t = 0; t < j->ntasks; t++) wrong += atomic_load(&j->ran[t]) != 1;
        j->id = -1;
        j->ntasks = MAX_TASKS * 16;
        free(j);
        jobs++;
    }
    pool_destroy(p);
    printf("jobs %ld stale %ld wrong %ld\n", jobs, atomic_load(&stale), wrong);
    return 0;
}
