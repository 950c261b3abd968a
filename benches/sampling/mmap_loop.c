/* The sampling perturbation workload of issue 20: map SIZE bytes, touch every page, then loop
 * ITERATIONS times over mmap + touch + munmap of 64 KiB. Every mmap/munmap takes the process's
 * memory-map lock for writing, so it waits while a reader walks the page tables (smaps_rollup).
 * Prints one JSON document with its own timings (seconds, CLOCK_MONOTONIC).
 * Usage: mmap_loop SIZE_MIB ITERATIONS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 4096;
    long iterations = argc > 2 ? strtol(argv[2], 0, 10) : 200000;
    double t0 = now();
    size_t size = mib << 20;
    char *big = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (big == MAP_FAILED) return 3;
    /* No transparent huge pages: 4 KiB pages, as a heap of many allocations has. */
    madvise(big, size, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < size; i += 4096) big[i] = 1;
    double t1 = now();
    const size_t small = 64 << 10;
    for (long i = 0; i < iterations; i++) {
        char *p = mmap(0, small, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 4;
        for (size_t j = 0; j < small; j += 4096) p[j] = 1;
        munmap(p, small);
    }
    double t2 = now();
    printf("{\"size-mib\": %zu, \"iterations\": %ld, \"touch-seconds\": %.6f, \"loop-seconds\": %.6f, "
           "\"total-seconds\": %.6f}\n", mib, iterations, t1 - t0, t2 - t1, t2 - t0);
    return 0;
}
