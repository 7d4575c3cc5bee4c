/* inputs.c - the user's batch for a run (carve run --inputs FILE).
 *
 * Three forms, chosen by what the path is (docs/run.md shows the Python that
 * writes each):
 *  - FILE.npz: numpy's np.savez (stored, not np.savez_compressed: carve reads
 *    no deflate), one array per input under the input's name;
 *  - FILE.pb (any other name): an ONNX GraphProto whose initializers are the
 *    tensors (onnx.helper.make_graph([], "batch", [], [], initializer=...),
 *    as tests/onnx's .ref.pb files are);
 *  - a folder: one ONNX TensorProto file a tensor (*.pb, as ONNX's test data
 *    sets hold them), each named as its input.
 * Every input of the step must be given, at its exact shape: integers for
 * ids and labels (any integer type, within int32), floats (or bools) for
 * float inputs.  Tensors named as no input are ignored (a reference file may
 * hold the loss and gradients beside the batch) and counted.
 */
#include "session/session.h"
#include "onnx/onnx.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INPUTS_MAX_BYTES ((size_t)2 << 30)

typedef struct tensor_list {
    onnx_tensor *t;
    int n, cap;
} tensor_list;

static onnx_tensor *list_add(tensor_list *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->t = ir_xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    memset(&l->t[l->n], 0, sizeof *l->t);
    return &l->t[l->n++];
}

static void list_free(tensor_list *l)
{
    for (int i = 0; i < l->n; i++) onnx_tensor_free(&l->t[i]);
    free(l->t);
}

/* ---- .npz: a zip of .npy files, stored ---------------------------------- */

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The element type of an .npy descr ('<f4', '|b1', ...): its size and kind
 * ('f' float, 'i' signed, 'u' unsigned, 'b' bool), 0 when carve reads none. */
static int npy_type(const char *descr, char *kind)
{
    if (descr[0] != '<' && descr[0] != '|' && descr[0] != '=') return 0;
    *kind = descr[1];
    int size = atoi(descr + 2);
    int ok = (*kind == 'f' && (size == 4 || size == 8)) || ((*kind == 'i' || *kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
             (*kind == 'b' && size == 1);
    return ok ? size : 0;
}

/* The text after key in an .npy header's dict, or NULL. */
static const char *npy_field(const char *h, const char *key)
{
    const char *p = strstr(h, key);
    if (!p) return NULL;
    p = strchr(p + strlen(key), ':');
    if (!p) return NULL;
    while (*++p == ' ') {
    }
    return p;
}

/* One .npy member (bytes b, n of them) named name into t. */
static int npy_read(const char *path, const char *name, const unsigned char *b, uint64_t n, onnx_tensor *t, char *err, size_t errlen)
{
    if (n < 10 || memcmp(b, "\x93NUMPY", 6)) return ir_errf(err, errlen, "%s: member '%s' is not an .npy array", path, name);
    int v1 = b[6] == 1;
    uint64_t hl = v1 ? le(b + 8, 2) : le(b + 8, 4), off = (v1 ? 10 : 12) + hl;
    if (n < 12 || off > n || hl > 65536) return ir_errf(err, errlen, "%s: member '%s': its .npy header is cut short", path, name);
    char h[65540];
    memcpy(h, b + (v1 ? 10 : 12), hl);
    h[hl] = 0;
    const char *d = npy_field(h, "'descr'"), *f = npy_field(h, "'fortran_order'"), *s = npy_field(h, "'shape'");
    char descr[16] = "", kind = 0;
    if (!d || !f || !s || sscanf(d, "'%15[^']'", descr) != 1 || *s != '(')
        return ir_errf(err, errlen, "%s: member '%s': an .npy header without descr, fortran_order and shape", path, name);
    int size = npy_type(descr, &kind);
    if (!size) return ir_errf(err, errlen, "%s: '%s' holds '%s' elements; carve reads little-endian floats (f4, f8), integers and bools", path, name, descr);
    if (strncmp(f, "False", 5)) return ir_errf(err, errlen, "%s: '%s' is in Fortran order; save it C-ordered (np.ascontiguousarray)", path, name);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n = 1;
    for (s++; *s && *s != ')';) {
        char *end;
        long long dim = strtoll(s, &end, 10);
        if (end == s) break;
        if (t->rank == 8 || dim < 0) return ir_errf(err, errlen, "%s: '%s' has more than 8 dims or a negative one", path, name);
        t->dims[t->rank++] = dim;
        if (ir_mul_i64(t->n, dim, &t->n) < 0 || t->n > (int64_t)(n / (uint64_t)size))
            return ir_errf(err, errlen, "%s: '%s': its shape holds more elements than the file", path, name);
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    if ((uint64_t)t->n * (uint64_t)size > n - off) return ir_errf(err, errlen, "%s: '%s': its data is cut short", path, name);
    t->is_int = kind == 'i' || kind == 'u';
    t->data = ir_xrealloc(NULL, (size_t)(t->n ? t->n : 1) * 4);
    const unsigned char *p = b + off;
    for (int64_t i = 0; i < t->n; i++, p += size) {
        uint64_t raw = le(p, size);
        if (kind == 'f') ((float *)t->data)[i] = size == 4 ? (union { uint32_t u; float f; }){(uint32_t)raw}.f
                                                           : (float)(union { uint64_t u; double f; }){raw}.f;
        else if (kind == 'b') ((float *)t->data)[i] = raw != 0;
        else {
            int64_t x = kind == 'u' || size == 8 ? (int64_t)raw : (int64_t)(raw << (64 - 8 * size)) >> (64 - 8 * size);
            if (x < INT32_MIN || x > INT32_MAX || (kind == 'u' && size == 8 && raw > INT32_MAX))
                return ir_errf(err, errlen, "%s: '%s' element %lld (%lld) does not fit int32", path, name, (long long)i, (long long)x);
            ((int32_t *)t->data)[i] = (int32_t)x;
        }
    }
    return 0;
}

/* Every member of the stored zip b (n bytes) into l. */
static int npz_read(const char *path, const unsigned char *b, size_t n, tensor_list *l, char *err, size_t errlen)
{
    size_t at = 0;
    while (at + 4 <= n && le(b + at, 4) == 0x04034b50) {
        if (at + 30 > n) return ir_errf(err, errlen, "%s: a zip header cut short", path);
        const unsigned char *h = b + at;
        unsigned flags = (unsigned)le(h + 6, 2), method = (unsigned)le(h + 8, 2);
        uint64_t csize = le(h + 18, 4), usize = le(h + 22, 4), nlen = le(h + 26, 2), xlen = le(h + 28, 2);
        if (at + 30 + nlen + xlen > n) return ir_errf(err, errlen, "%s: a zip header cut short", path);
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)(nlen < 159 ? nlen : 159), (const char *)h + 30);
        if (method != 0)
            return ir_errf(err, errlen, "%s: '%s' is compressed (np.savez_compressed); carve reads np.savez's stored arrays", path, name);
        for (const unsigned char *x = h + 30 + nlen; x + 4 <= h + 30 + nlen + xlen;) { /* zip64: the sizes */
            uint64_t id = le(x, 2), len = le(x + 2, 2);
            const unsigned char *q = x + 4;
            if (id == 1) {
                if (usize == 0xffffffffu && q + 8 <= x + 4 + len) usize = le(q, 8), q += 8;
                if (csize == 0xffffffffu && q + 8 <= x + 4 + len) csize = le(q, 8);
            }
            x += 4 + len;
        }
        if ((flags & 8) && !csize) return ir_errf(err, errlen, "%s: '%s' was written to a stream (no sizes in its header); np.savez it to a file", path, name);
        size_t data = at + 30 + nlen + xlen;
        if (csize != usize || csize > n - data) return ir_errf(err, errlen, "%s: '%s': its data is cut short", path, name);
        size_t len = strlen(name);
        if (len > 4 && !strcmp(name + len - 4, ".npy")) name[len - 4] = 0;
        if (npy_read(path, name, b + data, csize, list_add(l), err, errlen) < 0) return -1;
        at = data + csize;
    }
    if (!l->n) return ir_errf(err, errlen, "%s: not an .npz file (no zip member at its start)", path);
    return 0;
}

/* ---- the forms ------------------------------------------------------------ */

static int read_folder(const char *path, tensor_list *l, char *err, size_t errlen)
{
    DIR *d = opendir(path);
    if (!d) return ir_errf(err, errlen, "%s: cannot open the folder", path);
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".pb")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        rc = onnx_tensor_read(p, list_add(l), err, errlen);
        if (rc == 0 && !l->t[l->n - 1].name[0]) rc = ir_errf(err, errlen, "%s: the TensorProto has no name (name it as its input)", p);
    }
    closedir(d);
    if (rc == 0 && !l->n) rc = ir_errf(err, errlen, "%s: no TensorProto files (*.pb) in the folder", path);
    return rc;
}

static int read_any(const char *path, tensor_list *l, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return read_folder(path, l, err, errlen);
    size_t len = strlen(path);
    if (len > 4 && !strcmp(path + len - 4, ".npz")) {
        char why[200];
        size_t n;
        unsigned char *b = (unsigned char *)ir_read_input(path, INPUTS_MAX_BYTES, &n, why, sizeof why);
        if (!b) return ir_errf(err, errlen, "%s: cannot open: %s", path, why);
        int rc = npz_read(path, b, n, l, err, errlen);
        free(b);
        return rc;
    }
    int n = 0;
    onnx_tensor *t = onnx_tensors_read_graph(path, &n, err, errlen);
    if (!t) return -1;
    l->t = t;
    l->n = l->cap = n;
    if (!n) return ir_errf(err, errlen, "%s: a GraphProto without initializers (the batch goes in them, named as the inputs)", path);
    return 0;
}

static void shape_str(int rank, const int64_t *dims, char *s, size_t n)
{
    int k = snprintf(s, n, "[");
    for (int d = 0; d < rank && k < (int)n; d++) k += snprintf(s + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (k < (int)n) snprintf(s + k, n - (size_t)k, "]");
}

/* Attaches tensor t to input v of g: its shape and kind must be v's. */
static int attach(ir_graph *g, int v, const onnx_tensor *t, const char *path, char *err, size_t errlen)
{
    const ir_value *x = &g->values[v];
    int same = t->rank == x->rank;
    for (int d = 0; same && d < x->rank; d++) same = t->dims[d] == x->dims[d];
    if (!same) {
        char want[160], got[160];
        shape_str(x->rank, x->dims, want, sizeof want);
        shape_str(t->rank, t->dims, got, sizeof got);
        return ir_errf(err, errlen, "%s: input '%s' is %s here, the file's is %s", path, x->name, want, got);
    }
    if (t->is_int != (x->dtype == IR_I32))
        return ir_errf(err, errlen, "%s: input '%s' takes %s, the file holds %s", path, x->name, x->dtype == IR_I32 ? "integers" : "floats",
                       t->is_int ? "integers" : "floats");
    if (ir_data_set(g, v, t->data, t->n) < 0) return ir_errf(err, errlen, "%s: %s", path, ir_error(g));
    return 0;
}

/* Attaches to input v of g, micro-batch k of n (ir_microbatch), its rows
 * of t: t's shape must be v's but along one dim, where it holds n times
 * v's, micro-batch k the k-th block of them (as the plain step's check
 * puts the micro-batches back together, session/oracle.c). */
static int attach_micro(ir_graph *g, int v, const onnx_tensor *t, int n, const char *path, char *err, size_t errlen)
{
    const ir_value *x = &g->values[v];
    int d = -1, k = x->micro;
    for (int i = 0; t->rank == x->rank && i < x->rank && d != -2; i++)
        if (t->dims[i] != x->dims[i]) d = d < 0 && t->dims[i] == x->dims[i] * n ? i : -2;
    if (d < 0 || k < 0 || k >= n) {
        char want[160], got[160];
        shape_str(x->rank, x->dims, want, sizeof want);
        shape_str(t->rank, t->dims, got, sizeof got);
        return ir_errf(err, errlen, "%s: input '%s' is %d micro-batches of %s here, the file's is %s (not %d of them along one dim)",
                       path, x->batch_of, n, want, got, n);
    }
    if (t->is_int != (x->dtype == IR_I32))
        return ir_errf(err, errlen, "%s: input '%s' takes %s, the file holds %s", path, x->batch_of,
                       x->dtype == IR_I32 ? "integers" : "floats", t->is_int ? "integers" : "floats");
    int64_t outer = 1, inner = 1, rows = x->dims[d];
    for (int i = 0; i < d; i++) outer *= x->dims[i];
    for (int i = d + 1; i < x->rank; i++) inner *= x->dims[i];
    char *mine = ir_xcalloc((size_t)(outer * rows * inner) + 1, 4);
    for (int64_t q = 0; q < outer; q++)
        memcpy(mine + 4 * (q * rows * inner), (const char *)t->data + 4 * ((q * t->dims[d] + k * rows) * inner), (size_t)(4 * rows * inner));
    int rc = ir_data_set(g, v, mine, outer * rows * inner);
    free(mine);
    return rc < 0 ? ir_errf(err, errlen, "%s: %s", path, ir_error(g)) : 0;
}

int session_inputs_attach(ir_graph *g, const char *path, char *note, size_t note_len, char *err, size_t errlen)
{
    tensor_list l = {0};
    int rc = read_any(path, &l, err, errlen), given = 0, n = g->rewrites.microbatches;
    for (int v = 0; rc == 0 && v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INPUT) continue;
        const char *name = x->batch_of ? x->batch_of : x->name; /* a micro-batch's: the step's input it is part of */
        const onnx_tensor *t = NULL;
        for (int i = 0; i < l.n && !t; i++)
            if (!strcmp(l.t[i].name, name)) t = &l.t[i];
        if (!t) rc = ir_errf(err, errlen, "%s: no tensor for input '%s' (every input of the step is given by name)", path, name);
        else rc = x->batch_of && n > 1 ? attach_micro(g, v, t, n, path, err, errlen) : attach(g, v, t, path, err, errlen);
        given += !x->batch_of || x->micro == 0;
    }
    if (rc == 0 && note) snprintf(note, note_len, "%s (%d input%s; %d other tensor%s ignored)", path, given, given == 1 ? "" : "s",
                                  l.n - given, l.n - given == 1 ? "" : "s");
    list_free(&l);
    return rc;
}

int session_run_attach_inputs(ir_graph *g, const pipe_spec *ps, ir_graph *plain, const char *path, char *note, size_t note_len,
                              char *err, size_t errlen)
{
    if (ps->microbatches >= 1) /* (microbatch:N's micro-batches are cut from it: attach_micro) */
        return ir_errf(err, errlen, "gives the whole batch of a plain step; a pipeline's step is built at the micro-batch");
    if (session_inputs_attach(g, path, note, note_len, err, errlen) < 0) return -1;
    char e2[1024];
    if (plain && session_inputs_attach(plain, path, NULL, 0, e2, sizeof e2) < 0)
        return ir_errf(err, errlen, "(the plain step): %s", e2);
    return 0;
}
