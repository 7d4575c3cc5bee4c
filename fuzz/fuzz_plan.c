/* fuzz_plan.c - the plan reader on main (plan_load, which reads a file): the
 * input goes into an in-memory file (memfd) that plan_load opens by its
 * /proc/self/fd path; a refusal must come with a message, a plan that loads
 * is freed without leaks.  A plan of a graph file has that file hashed as a
 * command does (plan_file_hash): its path is the fuzzer's, so it may name
 * /dev/zero, /dev/urandom or a pipe, which were hashed for ever (issue 43).
 * A relative path is resolved in the plan's folder, /proc/self/fd: so
 * "model.graph": "512" names the read end of a pipe kept open at fd 512 with
 * its write end open too (a read would block, never end). */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>

#include "plan/plan.h"
#include "fuzz/fuzz.h"

#define PIPE_FD 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        int p[2];
        if ((fd = memfd_create("carve-fuzz-plan", 0)) < 0 || pipe(p) != 0 || dup2(p[0], PIPE_FD) != PIPE_FD) abort();
        close(p[0]); /* p[1], the write end, stays open */
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size > 65536) return 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char err[1024];
    plan pl;
    if (plan_load(path, &pl, err, sizeof err) < 0) {
        fuzz_check_message(err);
        return 0;
    }
    char hash[24];
    if (!pl.model[0] && pl.graph_path[0] && plan_file_hash(pl.graph_path, hash, err, sizeof err) < 0) fuzz_check_message(err);
    plan_free(&pl);
    return 0;
}
