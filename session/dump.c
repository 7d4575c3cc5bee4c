/* dump.c - the tensors of a run's first step, for a user to compare with
 * their framework (carve run --dump DIR; docs/run.md).
 *
 * Into DIR (made when missing; an existing one must be a folder, not a
 * link), as numpy's .npy files (format 1.0, little-endian f32, C order), from
 * the reference executor (the one-device step the run is checked against, on
 * the same params and batch):
 *   loss.npy           the loss of step 1, shape ()
 *   grad.NAME.npy      each param's gradient of step 1 (on the initial params,
 *                      as a framework's first backward pass computes it), in
 *                      the shape the model file holds it (an imported param
 *                      carve holds split into heads is written in the file's
 *                      shape, the same elements in the same order); a '/' in
 *                      a name is written '_'.
 * Each file is written beside its name and renamed into place, so a file of
 * DIR is whole or absent. */
#include "session/run_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The .npy header of an f32 array of `rank` dims: magic, version 1.0, the
 * dict padded with spaces to a multiple of 64 bytes, ending in '\n'. */
static size_t npy_header(char *h, size_t cap, int rank, const int64_t *dims)
{
    char shape[32 * IR_MAX_RANK + 8];
    size_t n = (size_t)snprintf(shape, sizeof shape, "(");
    for (int d = 0; d < rank; d++) n += (size_t)snprintf(shape + n, sizeof shape - n, "%lld,%s", (long long)dims[d], d + 1 < rank ? " " : "");
    snprintf(shape + n, sizeof shape - n, ")");
    char dict[sizeof shape + 64];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape);
    size_t total = 10 + (size_t)len + 1, pad = (64 - total % 64) % 64;
    if (total + pad > cap) return 0;
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    size_t hl = (size_t)len + pad + 1;
    h[8] = (char)(hl & 0xff), h[9] = (char)(hl >> 8);
    memcpy(h + 10, dict, (size_t)len);
    memset(h + 10 + len, ' ', pad);
    h[10 + (size_t)len + pad] = '\n';
    return total + pad;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (const char *c = p; n > 0;) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

/* DIR/file written as an .npy of n floats in `dims`, whole or not at all. */
static int write_npy(const char *dir, const char *file, int rank, const int64_t *dims, const float *x, int64_t n, char *err,
                     size_t errlen)
{
    char path[4096], tmp[4200], h[512];
    size_t hn = npy_header(h, sizeof h, rank, dims);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path || !hn)
        return snprintf(err, errlen, "%.200s/%.200s: the name is too long", dir, file), -1;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd < 0) return snprintf(err, errlen, "%.300s: %s", tmp, strerror(errno)), -1;
    int bad = write_all(fd, h, hn) < 0 || write_all(fd, x, (size_t)n * sizeof *x) < 0;
    bad |= close(fd) < 0;
    if (bad || rename(tmp, path) < 0) {
        snprintf(err, errlen, "%.300s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int session_dump_dir_check(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return snprintf(err, errlen, "%.300s: exists and is not a folder (a file or a link)", dir), -1;
        return 0;
    }
    if (errno != ENOENT) return snprintf(err, errlen, "%.300s: %s", dir, strerror(errno)), -1;
    /* missing: made after step 1, in a folder that must be there now */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    while (slash && slash > parent && slash[1] == 0) *slash = 0, slash = strrchr(parent, '/'); /* "out/" */
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
        return snprintf(err, errlen, "%.300s: its folder %.300s is missing or not a folder", dir, parent), -1;
    return 0;
}

int session_run_dump(session_run *r, const char *dir, int *n_written, char *err, size_t errlen)
{
    *n_written = 0;
    if (!r->ref) return 0; /* not the root: it holds no reference */
    if (session_dump_dir_check(dir, err, errlen) < 0) return -1;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) return snprintf(err, errlen, "%.300s: %s", dir, strerror(errno)), -1;
    session_run_find_params(r);
    const ir_graph *g = session_run_check_graph(r);
    float loss = (float)r->c.loss_ref;
    if (write_npy(dir, "loss.npy", 0, NULL, &loss, 1, err, errlen) < 0) return -1;
    ++*n_written;
    for (int i = 0; i < r->v.n_params; i++) {
        int gv = r->grad_value[i], rank, p = g->values[gv].grad_of;
        int64_t dims[IR_MAX_RANK];
        const float *d = exec_ref_data(r->ref, gv);
        if (!d) continue;
        if (!ir_file_shape(g, p, &rank, dims)) {
            rank = g->values[gv].rank;
            memcpy(dims, g->values[gv].dims, sizeof dims);
        }
        char file[1024];
        snprintf(file, sizeof file, "grad.%.1000s.npy", r->v.param_names[i]);
        for (char *c = file; *c; c++)
            if (*c == '/') *c = '_';
        if (write_npy(dir, file, rank, dims, d, ir_numel(&g->values[gv]), err, errlen) < 0) return -1;
        ++*n_written;
    }
    return 0;
}
