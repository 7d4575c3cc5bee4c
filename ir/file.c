/* file.c - safe input and output files.
 *
 * Inputs: every file carve reads (graphs, plans, profiles, schedules, ONNX
 * files, a plan's graph file) is opened by ir_open_input, which takes only a
 * regular file: a fifo would block open() and read() forever, a device such
 * as /dev/zero or /dev/urandom never ends, a folder is no file.  The open is
 * non-blocking and the type is checked on the descriptor (fstat), so nothing
 * can be swapped in between the check and the read.
 *
 * Outputs: every file carve writes (plans, graphs, hardware profiles,
 * exports, reports) goes through ir_write_atomic.
 *
 * The rules (docs/reliability.md): the target is refused when it exists and
 * is not a regular file (a device node such as /dev/full, a folder, a fifo)
 * or is a symbolic link (writing would replace the link's target or the
 * link); the folder must accept a new file, which is tried for real (a probe
 * file, created and removed) because access() says yes to root on a
 * read-only mount's permission bits; the bytes go to a temporary file in the
 * same folder (mkstemp: O_EXCL, never through a link), are synced, and only a
 * complete file is renamed over the target.  On any failure (a full disk,
 * RLIMIT_FSIZE, an I/O error) the temporary file is removed and the target is
 * untouched.  SIGINT and SIGTERM are held while the temporary file exists, so
 * a signal cannot leave it behind; they are delivered after.
 */
#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- inputs ------------------------------------------------------------- */

const char *ir_not_regular(unsigned m)
{
    if (S_ISREG(m)) return NULL;
    if (S_ISDIR(m)) return "is a directory, not a regular file";
    if (S_ISFIFO(m)) return "is a fifo (named pipe), not a regular file";
    if (S_ISCHR(m) || S_ISBLK(m)) return "is a device, not a regular file";
    if (S_ISSOCK(m)) return "is a socket, not a regular file";
    return "is not a regular file";
}

/* The inputs opened while the guard is on, by device and inode (a short
 * list: a command reads a handful of files).  Readers may run on several
 * threads (autopart's levels build steps side by side). */
#define MAX_INPUTS 64
static struct {
    int on, n;
    dev_t dev[MAX_INPUTS];
    ino_t ino[MAX_INPUTS];
} inputs;
static pthread_mutex_t inputs_lock = PTHREAD_MUTEX_INITIALIZER;

void ir_input_guard(int on)
{
    pthread_mutex_lock(&inputs_lock);
    inputs.on = on;
    inputs.n = 0;
    pthread_mutex_unlock(&inputs_lock);
}

static void note_input(const struct stat *st)
{
    pthread_mutex_lock(&inputs_lock);
    int seen = 0;
    for (int i = 0; i < inputs.n && !seen; i++) seen = inputs.dev[i] == st->st_dev && inputs.ino[i] == st->st_ino;
    if (inputs.on && !seen && inputs.n < MAX_INPUTS) {
        inputs.dev[inputs.n] = st->st_dev;
        inputs.ino[inputs.n++] = st->st_ino;
    }
    pthread_mutex_unlock(&inputs_lock);
}

static int was_input(const struct stat *st)
{
    pthread_mutex_lock(&inputs_lock);
    int seen = 0;
    for (int i = 0; i < inputs.n && !seen; i++) seen = inputs.dev[i] == st->st_dev && inputs.ino[i] == st->st_ino;
    pthread_mutex_unlock(&inputs_lock);
    return seen;
}

void ir_input_note(int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0) note_input(&st);
}

int ir_open_input(const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    struct stat st;
    const char *bad = fstat(fd, &st) != 0 ? strerror(errno) : ir_not_regular(st.st_mode);
    int fl = bad ? 0 : fcntl(fd, F_GETFL);
    if (!bad && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) bad = strerror(errno);
    if (bad) {
        snprintf(why, whylen, "%s", bad);
        close(fd);
        return -1;
    }
    note_input(&st);
    return fd;
}

ssize_t ir_read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, (char *)buf + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

char *ir_read_input(const char *path, size_t max, size_t *n, char *why, size_t whylen)
{
    int fd = ir_open_input(path, why, whylen);
    if (fd < 0) return NULL;
    struct stat st = {0};
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > max) {
        close(fd);
        snprintf(why, whylen, "larger than %zu MB", max >> 20);
        return NULL;
    }
    /* the size fstat gave (0 for /proc's files, which are read to their end anyway), one byte more to see the end */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 65536, len = 0;
    char *buf = NULL;
    for (;;) {
        if (len == cap || !buf) {
            if (buf) cap = cap > max / 2 ? max + 1 : cap * 2;
            char *q = realloc(buf, cap + 1);
            if (!q) {
                snprintf(why, whylen, "out of memory reading %zu bytes", cap);
                break;
            }
            buf = q;
        }
        ssize_t k = ir_read_full(fd, buf + len, cap - len);
        if (k < 0) {
            snprintf(why, whylen, "cannot read: %s", strerror(errno));
            break;
        }
        len += (size_t)k;
        if (len > max) {
            snprintf(why, whylen, "larger than %zu MB", max >> 20);
            break;
        }
        if (len < cap) { /* the end */
            close(fd);
            buf[len] = 0;
            *n = len;
            return buf;
        }
    }
    close(fd);
    free(buf);
    return NULL;
}

int ir_out_is_input(const char *out, const char *in, char *err, size_t errlen)
{
    struct stat so, si;
    if (!out || !in || stat(out, &so) != 0 || stat(in, &si) != 0) return 0;
    if (so.st_dev != si.st_dev || so.st_ino != si.st_ino) return 0;
    if (!strcmp(out, in)) return ir_errf(err, errlen, "%s: is an input of this command; refusing to replace it (write elsewhere)", out);
    return ir_errf(err, errlen, "%s: is the input '%s' (the same file); refusing to replace it (write elsewhere)", out, in);
}

/* ---- outputs ------------------------------------------------------------ */

/* The folder part of path ("." when there is none); malloc'd, NULL on OOM. */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

/* Refuses an existing target that is not a plain regular file. */
static int check_target(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return ir_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return ir_errf(err, errlen, "%s: is a symbolic link; refusing to write through it (give the real path)", path);
    if (S_ISDIR(st.st_mode)) return ir_errf(err, errlen, "%s: cannot write: %s", path, strerror(EISDIR));
    if (!S_ISREG(st.st_mode))
        return ir_errf(err, errlen, "%s: is not a regular file (a device, fifo or socket); refusing to replace it", path);
    if (was_input(&st)) return ir_errf(err, errlen, "%s: is an input of this command; refusing to replace it (write elsewhere)", path);
    if (access(path, W_OK) != 0) return ir_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

/* Creates a temporary file next to path; returns its fd (and name in *tmp,
 * malloc'd) or -1 with errno set. */
static int make_temp(const char *path, char **tmp)
{
    size_t n = strlen(path) + 16;
    if (!(*tmp = malloc(n))) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(*tmp, n, "%s.tmpXXXXXX", path);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        int e = errno;
        free(*tmp);
        *tmp = NULL;
        errno = e;
    }
    return fd;
}

int ir_out_check(const char *path, char *err, size_t errlen)
{
    if (!path || !*path) return ir_errf(err, errlen, "output path is empty");
    if (check_target(path, err, errlen) < 0) return -1;
    char *dir = folder_of(path);
    if (!dir) return ir_errf(err, errlen, "%s: out of memory", path);
    struct stat st;
    int rc = 0;
    if (stat(dir, &st) != 0) rc = ir_errf(err, errlen, "%s: cannot write in folder '%s': %s", path, dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode)) rc = ir_errf(err, errlen, "%s: cannot write: '%s' is not a folder", path, dir);
    else {
        char *tmp;
        int fd = make_temp(path, &tmp);
        if (fd < 0) rc = ir_errf(err, errlen, "%s: cannot write in folder '%s': %s", path, dir, strerror(errno));
        else {
            close(fd);
            unlink(tmp);
            free(tmp);
        }
    }
    free(dir);
    return rc;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Steps of ir_write_atomic once the temporary file is open: write, set the
 * mode a new file would get, sync, close (always), rename.  Returns 0 or -1
 * with *step naming the failed step and errno set. */
static int fill_and_rename(int fd, const char *tmp, const char *path, const void *data, size_t n, const char **step)
{
    mode_t mask = umask(0);
    umask(mask);
    int ok = 1, e = 0;
    *step = "cannot write";
    if (write_all(fd, data, n) < 0) ok = 0;
    else if ((*step = "cannot sync", fchmod(fd, 0666 & ~mask) != 0 || fsync(fd) != 0)) ok = 0;
    if (!ok) e = errno;
    if (close(fd) != 0 && ok) {
        *step = "cannot close";
        return -1;
    }
    if (!ok) {
        errno = e;
        return -1;
    }
    *step = "cannot rename the temporary file onto it";
    return rename(tmp, path);
}

int ir_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    if (ir_out_check(path, err, errlen) < 0) return -1;
    sigset_t hold, old;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &hold, &old);
    char *tmp = NULL;
    int fd = make_temp(path, &tmp), rc = 0;
    if (fd < 0) {
        rc = ir_errf(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
    } else {
        const char *step = "";
        /* the target may have been swapped for a link or a device meanwhile */
        char e2[IR_ERR_LEN];
        if (check_target(path, e2, sizeof e2) < 0) {
            close(fd);
            rc = ir_errf(err, errlen, "%s", e2);
        } else if (fill_and_rename(fd, tmp, path, data, n, &step) < 0) {
            rc = ir_errf(err, errlen, "%s: %s: %s", path, step, strerror(errno));
        }
        if (rc < 0) unlink(tmp);
        free(tmp);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
