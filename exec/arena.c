/* arena.c - one anonymous mapping for many buffers (see arena.h). */
#include "exec/arena.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#define GUARD 64
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define GUARD 0
#endif

#define ALIGN 64
#define HUGE_PAGE ((size_t)2 << 20)

size_t exec_arena_size(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

size_t exec_arena_slot(size_t n) { return exec_arena_size(n) + GUARD; }

/* Fault injection, as SQLite tests its allocator: with CARVE_FAULT_MAP=N in
 * the environment the Nth exec_arena_map of the process (counted across
 * threads from 1) fails as if the kernel had refused the mapping, so tests
 * can check every caller's out-of-memory path ends in a clean message. */
static int injected_fault(void)
{
    static long countdown = -2; /* -2: the environment not read yet, -1: off */
    long c = __atomic_load_n(&countdown, __ATOMIC_ACQUIRE);
    if (c == -2) {
        const char *s = getenv("CARVE_FAULT_MAP");
        long n = s ? strtol(s, NULL, 10) : 0;
        long want = n > 0 ? n : -1;
        __atomic_compare_exchange_n(&countdown, &c, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    for (;;) {
        c = __atomic_load_n(&countdown, __ATOMIC_ACQUIRE);
        if (c < 0) return 0;
        if (__atomic_compare_exchange_n(&countdown, &c, c - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return c == 1;
    }
}

int exec_arena_map(exec_arena *a, size_t bytes)
{
    if (injected_fault()) {
        a->base = NULL;
        a->mapped = 0;
        return -1;
    }
    a->mapped = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (!a->mapped) a->mapped = HUGE_PAGE;
    void *m = mmap(NULL, a->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        a->base = NULL;
        a->mapped = 0;
        return -1;
    }
    /* a request: where the kernel grants no huge pages, small ones serve */
    (void)madvise(m, a->mapped, MADV_HUGEPAGE);
    a->base = m;
    return 0;
}

void exec_arena_place(exec_arena *a, size_t off, size_t n)
{
    ASAN_UNPOISON_MEMORY_REGION(a->base + off, n);
    /* the padding up to the next 64 bytes, and the guard */
    ASAN_POISON_MEMORY_REGION(a->base + off + n, exec_arena_size(n) - n + GUARD);
}

void exec_arena_unmap(exec_arena *a)
{
    if (!a->base) return;
    ASAN_UNPOISON_MEMORY_REGION(a->base, a->mapped);
    munmap(a->base, a->mapped);
    a->base = NULL;
    a->mapped = 0;
}

size_t exec_arena_resident(const exec_arena *a)
{
    if (!a->base) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (a->mapped + page - 1) / page, resident = 0;
    unsigned char *v = malloc(n ? n : 1);
    if (!v) return 0;
    if (mincore(a->base, a->mapped, v) == 0)
        for (size_t i = 0; i < n; i++) resident += v[i] & 1;
    free(v);
    return resident * page;
}
