/* fuzz_plan.c - the plan reader on main (plan_load, which reads a file): the
 * input goes into an in-memory file (memfd) that plan_load opens by its
 * /proc/self/fd path; a refusal must come with a message, a plan that loads
 * is freed without leaks. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>

#include "plan/plan.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        if ((fd = memfd_create("carve-fuzz-plan", 0)) < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size > 65536) return 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char err[1024];
    plan pl;
    if (plan_load(path, &pl, err, sizeof err) < 0) fuzz_check_message(err);
    else plan_free(&pl);
    return 0;
}
