/* util.h - helpers shared by the test programs that build models. */
#ifndef CARVE_TEST_UTIL_H
#define CARVE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "tests/test.h"

/* The training step (Adam) of model `spec`; exits with the message if the
 * spec or the build fails (a test cannot go on without its graph). */
static inline ir_graph *test_build_step(const char *spec)
{
    model_config cfg;
    char err[512];
    ir_graph *g = NULL;
    if (model_parse(spec, &cfg, err, sizeof err) == 0) g = model_build_step(&cfg, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", spec, err);
        exit(1);
    }
    return g;
}

/* g's SPMD program under schedule `sched` on the mesh `mesh_text` (the
 * state in *st, freed by the caller); exits on a malformed mesh or schedule,
 * a check fails when the schedule does not apply. */
static inline spmd_program *test_lower_sched(ir_graph *g, const char *mesh_text, const char *sched, shard_state **st)
{
    shard_mesh mesh;
    schedule sc;
    char err[512];
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    *st = shard_state_new(g, &mesh);
    CHECKF(sched_apply(&sc, *st, err, sizeof err) == 0, "%s: %s", sched, err);
    return spmd_lower(*st);
}

/* 1 when carve has MPI built in and mpirun is on the PATH.  Otherwise 0,
 * after counting a failure naming what did not run (MPI is a component
 * build.sh installs), or a skip when CARVE_TEST_WITHOUT names mpi. */
static inline int test_have_mpi(const char *what)
{
    if (exec_mpi_available() && system("command -v mpirun >/dev/null 2>&1") == 0) return 1;
    const char *without = getenv("CARVE_TEST_WITHOUT");
    if (without && strstr(without, "mpi")) SKIP("MPI is not built in (or mpirun is missing): %s did not run", what);
    else CHECKF(0, "MPI is not built in (or mpirun is missing): %s did not run (build.sh installs it as root; CARVE_TEST_WITHOUT=mpi to skip)", what);
    return 0;
}

/* Runs `mpirun -n N SELF --mpi ARGS` (a test program running itself on N
 * ranks; Open MPI's own start-up allocations are not reported as leaks
 * under AddressSanitizer).  Returns its exit status, its stdout and stderr
 * in out. */
static inline int test_mpirun(const char *self, int n, const char *args, char *out, size_t outlen)
{
    char cmd[2400];
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS='%s:detect_leaks=0' mpirun --oversubscribe --allow-run-as-root -n %d '%s' --mpi %s 2>&1",
             asan ? asan : "", n, self, args);
    FILE *f = popen(cmd, "r");
    size_t len = 0;
    out[0] = 0;
    if (!f) return -1;
    while (len + 1 < outlen && fgets(out + len, (int)(outlen - len), f)) len += strlen(out + len);
    return pclose(f);
}

/* The "N passed, N failed" line an MPI child printed in out, added to this
 * program's counts; a missing line (or rc != 0, or nothing passed) is one
 * failure, with out printed.  Returns 1 when the child's line was read. */
static inline int test_count_child(const char *what, int rc, const char *out)
{
    const char *line = strstr(out, " passed, ");
    int p = 0, f = 1;
    while (line && line > out && line[-1] >= '0' && line[-1] <= '9') line--;
    int ok = rc == 0 && line && sscanf(line, "%d passed, %d failed", &p, &f) == 2 && p > 0;
    if (ok) {
        test_passed += p;
        test_failed += f;
    }
    CHECKF(ok, "%s: exit %d, output:\n%s", what, rc, out);
    return ok;
}

#endif
