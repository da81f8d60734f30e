/* A slower disk for a benchmark's server: every fsync() and fdatasync() of the
   process waits STRATO_SLOWDISK_US microseconds before the real one, as on a
   network block device or a busy host. Loaded with LD_PRELOAD by
   benchmarks/slowdisk.py; nothing of Strato's own code changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static long delay_us = -1;

static void wait_like_a_slow_disk(void) {
    if (delay_us < 0) {
        const char *v = getenv("STRATO_SLOWDISK_US");
        delay_us = v ? atol(v) : 0;
    }
    if (delay_us > 0) {
        struct timespec t = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        while (nanosleep(&t, &t) != 0) {
        }
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    wait_like_a_slow_disk();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    wait_like_a_slow_disk();
    return real(fd);
}
