/*
 * LD_PRELOAD shim for running Debian's redis-server under libfaketime.
 *
 * Debian links redis-server against jemalloc, and jemalloc calls
 * clock_gettime() while it initialises; libfaketime's clock_gettime() is not
 * initialised yet at that point, initialises itself through dlsym(), which
 * allocates through jemalloc again: the process deadlocks at start
 * (libfaketime's known clash with jemalloc). Preloaded before libfaketime,
 * this shim sends the malloc family to glibc, so neither library recurses
 * into the other. Redis reads sizes back only through malloc_usable_size()
 * (routed to glibc too) and nallocx(), answered conservatively with the size
 * asked for. Test use only: the chaos harness's clock-fault scenarios.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t align, size_t n) { return __libc_memalign(align, n); }
void *aligned_alloc(size_t align, size_t n) { return __libc_memalign(align, n); }
void *valloc(size_t n) { return __libc_valloc(n); }
void *pvalloc(size_t n) { return __libc_pvalloc(n); }

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

size_t nallocx(size_t n, int flags)
{
    (void)flags;
    return n;
}

size_t malloc_usable_size(void *p)
{
    static size_t (*glibc)(void *);
    if (!glibc) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        glibc = (size_t (*)(void *))dlsym(libc, "malloc_usable_size");
    }
    return p && glibc ? glibc(p) : 0;
}
