/* spmd_mpi.c - the MPI backend: one device per rank (see spmd_impl.h).
 * This build has no MPI: the backend refuses to open. */
#include "exec/spmd_impl.h"

#include <stdio.h>
#include <stdlib.h>

int exec_mpi_available(void) { return 0; }

int exec_mpi_init(int *rank, int *size, char *err, size_t errlen)
{
    *rank = 0;
    *size = 1;
    return ir_errf(err, errlen, "this carve was built without MPI (install libopenmpi-dev and rebuild)");
}

int exec_mpi_agree(int rc) { return rc; }
int exec_mpi_same(uint64_t x) { return 1; }
void exec_mpi_finalize(void) {}

void exec_mpi_fail(int code, const char *msg)
{
    fprintf(stderr, "carve: %s\n", msg);
    exit(code);
}

static int no_mpi_open(exec_spmd *r, char *err, size_t errlen)
{
    return ir_errf(err, errlen, "this carve was built without MPI (install libopenmpi-dev and rebuild)");
}

const spmd_backend spmd_mpi_backend = {.name = "mpi", .open = no_mpi_open};
