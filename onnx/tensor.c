/* tensor.c - constant tensors of the ONNX reader, and TensorProto data.
 *
 * A constant is a shape and a block of doubles, whatever its ONNX element
 * type: shapes, axes and indices (int64) are exact up to 2^53, and float
 * values are rounded to their type after every folded op (ox_round_to), so a
 * folded table holds the numbers the exporter's runtime would compute in
 * that type.  TensorProto elements come from raw_data (little-endian), the
 * typed fields (float_data, int32_data, int64_data, double_data,
 * uint64_data), or an external data file beside the model (location, offset,
 * length; how torch saves models over 2 GB).
 */
#include "onnx/context.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ox_type_is_float(int type) { return type == OX_FLOAT || type == OX_FLOAT16 || type == OX_DOUBLE || type == OX_BFLOAT16; }

int ox_type_is_int(int type)
{
    switch (type) {
    case OX_UINT8: case OX_INT8: case OX_UINT16: case OX_INT16: case OX_INT32: case OX_INT64: case OX_BOOL:
    case OX_UINT32: case OX_UINT64: return 1;
    default: return 0;
    }
}

const char *ox_type_name(int type)
{
    static const char *const names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                        "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                        "complex128", "bfloat16"};
    return type >= 0 && type <= 16 ? names[type] : "unknown";
}

/* bytes of one element in raw_data, 0 for types carve does not read */
static int elem_bytes(int type)
{
    switch (type) {
    case OX_FLOAT: case OX_INT32: case OX_UINT32: return 4;
    case OX_UINT8: case OX_INT8: case OX_BOOL: return 1;
    case OX_UINT16: case OX_INT16: case OX_FLOAT16: case OX_BFLOAT16: return 2;
    case OX_INT64: case OX_UINT64: case OX_DOUBLE: return 8;
    default: return 0;
    }
}

int ox_ir_dtype(int type)
{
    switch (type) {
    case OX_FLOAT: case OX_DOUBLE: case OX_BOOL: return IR_F32;
    case OX_FLOAT16: return IR_F16;
    case OX_BFLOAT16: return IR_BF16;
    case OX_INT64: case OX_INT32: case OX_INT16: case OX_INT8: case OX_UINT8: case OX_UINT16: case OX_UINT32: return IR_I32;
    default: return -1;
    }
}

static float half_to_float(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f rounded to a float16's precision (round to nearest even), as a float */
static float round_half(float f)
{
    if (!isfinite(f)) return f;
    float a = fabsf(f);
    if (a >= 65520.0f) return f < 0 ? -INFINITY : INFINITY;
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    int q = e - 11 < -24 ? -24 : e - 11; /* 11 significant bits, subnormals below 2^-14 */
    float r = ldexpf(nearbyintf(ldexpf(f, -q)), q);
    return r;
}

static float round_bf16(float f)
{
    if (!isfinite(f)) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

double ox_round_to(int type, double x)
{
    switch (type) {
    case OX_FLOAT: return (double)(float)x;
    case OX_FLOAT16: return (double)round_half((float)x);
    case OX_BFLOAT16: return (double)round_bf16((float)x);
    case OX_DOUBLE: return x;
    case OX_BOOL: return x != 0;
    default: /* integers: truncated toward zero, as C casts do */
        return isfinite(x) ? trunc(x) : 0;
    }
}

int ox_const_reserve(ox_ctx *c, int64_t bytes)
{
    int64_t per = c->opt && c->opt->max_const > 0 && c->opt->max_const < OX_MAX_CONST ? c->opt->max_const : OX_MAX_CONST;
    int64_t cap = per < OX_MAX_CONST ? per * 16 : OX_MAX_CONST_BYTES;
    if (bytes > cap - c->const_bytes)
        return ox_fail(c, "the constants folded so far hold %lld MiB, %lld MiB more would pass the %lld MiB carve folds in all",
                       (long long)(c->const_bytes >> 20), (long long)(bytes >> 20), (long long)(cap >> 20));
    c->const_bytes += bytes;
    return 0;
}

/* The element count of (rank, dims), checked against the per-constant cap. */
static int tensor_count(ox_ctx *c, int rank, const int64_t *dims, int64_t *out)
{
    if (rank < 0 || rank > OX_MAX_RANK) return ox_fail(c, "a constant of rank %d (at most %d)", rank, OX_MAX_RANK);
    int64_t n = 1, cap = c->opt && c->opt->max_const > 0 && c->opt->max_const < OX_MAX_CONST ? c->opt->max_const : OX_MAX_CONST;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return ox_fail(c, "a constant with dim %d of %lld", i, (long long)dims[i]);
        if (ir_mul_i64(n, dims[i], &n) < 0 || n > cap)
            return ox_fail(c, "a constant of more than %lld elements, beyond what carve folds", (long long)cap);
    }
    *out = n;
    return 0;
}

/* n doubles for t, counted against the bound. */
static int tensor_alloc(ox_ctx *c, ox_tensor *t, int64_t n)
{
    if (ox_const_reserve(c, n * (int64_t)sizeof(double)) < 0) return -1;
    double *v = calloc((size_t)(n ? n : 1), sizeof(double));
    if (!v) {
        c->const_bytes -= n * (int64_t)sizeof(double);
        return ox_fail(c, "out of memory for a constant of %lld elements", (long long)n);
    }
    t->v = v;
    t->live = &c->const_bytes;
    return 0;
}

ox_tensor *ox_tensor_new(ox_ctx *c, int type, int rank, const int64_t *dims)
{
    int64_t n;
    if (tensor_count(c, rank, dims, &n) < 0) return NULL;
    ox_tensor *t = calloc(1, sizeof *t);
    if (!t) return ox_fail(c, "out of memory for a constant of %lld elements", (long long)n), NULL;
    if (tensor_alloc(c, t, n) < 0) {
        free(t);
        return NULL;
    }
    t->type = type;
    t->rank = rank;
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
    t->n = n;
    return t;
}

ox_tensor *ox_tensor_fill(ox_ctx *c, int type, int rank, const int64_t *dims, double value)
{
    int64_t n;
    if (tensor_count(c, rank, dims, &n) < 0) return NULL;
    value = ox_round_to(type, value);
    if (n <= OX_FILL_EAGER) {
        ox_tensor *t = ox_tensor_new(c, type, rank, dims);
        if (t)
            for (int64_t i = 0; i < n; i++) t->v[i] = value;
        return t;
    }
    ox_tensor *t = calloc(1, sizeof *t);
    if (!t) return ox_fail(c, "out of memory for a constant of %lld elements", (long long)n), NULL;
    t->type = type;
    t->rank = rank;
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
    t->n = n;
    t->fill = 1;
    t->fill_value = value;
    return t;
}

int ox_tensor_materialise(ox_ctx *c, ox_tensor *t)
{
    if (t->v) return 0;
    if (tensor_alloc(c, t, t->n) < 0) return -1;
    for (int64_t i = 0; i < t->n; i++) t->v[i] = t->fill_value;
    return 0;
}

void ox_tensor_free(ox_tensor *t)
{
    if (!t) return;
    if (t->live && t->v) *t->live -= t->n * (int64_t)sizeof(double);
    free(t->v);
    free(t);
}

ox_tensor *ox_tensor_scalar(ox_ctx *c, int type, double v)
{
    ox_tensor *t = ox_tensor_new(c, type, 0, NULL);
    if (t) t->v[0] = ox_round_to(type, v);
    return t;
}

int ox_tensor_splat(const ox_tensor *t)
{
    if (!t->v) return 1; /* a lazy fill */
    for (int64_t i = 1; i < t->n; i++)
        if (t->v[i] != t->v[0] && !(isnan(t->v[i]) && isnan(t->v[0]))) return 0;
    return 1;
}

int ox_axis(ox_ctx *c, int64_t axis, int rank, int64_t *out)
{
    if (axis < -rank || axis >= (rank ? rank : 1)) return ox_fail(c, "axis %lld is outside [%d, %d)", (long long)axis, -rank, rank);
    *out = axis < 0 ? axis + rank : axis;
    return 0;
}

int ox_broadcast_shape(ox_ctx *c, int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out)
{
    int n = ra > rb ? ra : rb;
    int64_t tmp[OX_MAX_RANK]; /* out may be a or b */
    if (n > OX_MAX_RANK) return ox_fail(c, "rank %d (at most %d)", n, OX_MAX_RANK);
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - ra ? 1 : a[i - (n - ra)], y = i < n - rb ? 1 : b[i - (n - rb)];
        if (x != y && x != 1 && y != 1) return ox_fail(c, "shapes do not broadcast: dim %d is %lld and %lld", i, (long long)x, (long long)y);
        tmp[i] = x == 1 ? y : x;
    }
    memcpy(out, tmp, sizeof(int64_t) * (size_t)n);
    *r = n;
    return 0;
}

int64_t ox_i64(double x)
{
    if (!(x == x)) return 0;
    if (x >= 9223372036854775807.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

void ox_bcast_init(ox_bcast *b, int rank, const int64_t *dims, int out_rank, const int64_t *out_dims)
{
    memset(b, 0, sizeof *b);
    b->rank = out_rank;
    int64_t stride = 1;
    for (int d = out_rank - 1; d >= 0; d--) {
        b->dims[d] = out_dims[d];
        int k = d - (out_rank - rank);
        if (k < 0) continue;
        b->stride[d] = dims[k] == 1 ? 0 : stride;
        stride *= dims[k];
    }
}

/* ---- TensorProto ---------------------------------------------------------- */

int ox_proto_shape(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int *rank, int64_t *dims, int64_t *n)
{
    if (!p->has_data_type || !elem_bytes(p->data_type))
        return ox_fail(c, "%s: element type %s is not supported", what, ox_type_name(p->has_data_type ? p->data_type : 0));
    if (p->n_dims > OX_MAX_RANK) return ox_fail(c, "%s: rank %zu (at most %d)", what, p->n_dims, OX_MAX_RANK);
    int64_t count = 1;
    for (size_t i = 0; i < p->n_dims; i++) {
        if (p->dims[i] < 0) return ox_fail(c, "%s: dim %zu is %lld", what, i, (long long)p->dims[i]);
        if (ir_mul_i64(count, p->dims[i], &count) < 0 || count > ((int64_t)1 << 48))
            return ox_fail(c, "%s: its element count overflows (more than 2^48)", what);
        dims[i] = p->dims[i];
    }
    *rank = (int)p->n_dims;
    *n = count;
    return 0;
}

/* The external data of p: the file (opened), offset and length in bytes. */
/* Opens location loc inside the model's folder c->dir one component at a
 * time, never through a symbolic link (O_NOFOLLOW on each: a link inside
 * the folder could name /etc/passwd), and only a regular file at the end (a
 * fifo would block).  Returns the descriptor, or -1 with a message. */
static int open_beneath(ox_ctx *c, const char *what, const char *loc)
{
    int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return ox_fail(c, "%s: the model's folder '%.200s': %s", what, c->dir, strerror(errno));
    char part[256];
    for (const char *s = loc;;) {
        size_t k = strcspn(s, "/");
        int last = !s[k];
        if (k >= sizeof part) {
            close(dfd);
            return ox_fail(c, "%s: external data location '%.80s': a name of %zu characters", what, loc, k);
        }
        memcpy(part, s, k);
        part[k] = 0;
        s += k + !last;
        if ((!k || !strcmp(part, ".")) && !last) continue;
        int fd = openat(dfd, part, (last ? O_RDONLY | O_NONBLOCK : O_RDONLY | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        int e = errno;
        struct stat st;
        if (fd < 0 && (e == ELOOP || e == ENOTDIR) && fstatat(dfd, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
            close(dfd);
            return ox_fail(c, "%s: external data location '%.80s': '%.80s' is a symbolic link (external data is read only from "
                              "files inside the model's folder, never through a link)", what, loc, part);
        }
        close(dfd);
        if (fd < 0) return ox_fail(c, "%s: external data file '%.200s/%.200s': %s", what, c->dir, loc, strerror(e));
        if (!last) {
            dfd = fd;
            continue;
        }
        int fl = fcntl(fd, F_GETFL);
        const char *bad = fstat(fd, &st) < 0 ? strerror(errno) : ir_not_regular(st.st_mode);
        if (!bad && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) bad = strerror(errno);
        if (bad) {
            close(fd);
            return ox_fail(c, "%s: external data '%.200s/%.200s' %s", what, c->dir, loc, bad);
        }
        ir_input_note(fd);
        return fd;
    }
}

/* The external data of p: its file opened (open_beneath), the offset and
 * length of p's bytes in it.  Returns 0, or -1 with a message. */
static int external_of(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int *fd, int64_t *off, int64_t *len)
{
    const char *loc = NULL;
    *off = 0;
    *len = -1;
    int seen_off = 0, seen_len = 0;
    for (size_t i = 0; i < p->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = p->external_data[i];
        if (!e->key || !e->value) continue;
        int is_loc = !strcmp(e->key, "location"), is_off = !strcmp(e->key, "offset"), is_len = !strcmp(e->key, "length");
        if ((is_loc && loc) || (is_off && seen_off++) || (is_len && seen_len++))
            return ox_fail(c, "%s: external data key '%s' given twice", what, e->key);
        char *end;
        if (is_loc) loc = e->value;
        else if (is_off || is_len) {
            errno = 0;
            long long x = strtoll(e->value, &end, 10);
            if (!e->value[0] || *end || errno || x < 0)
                return ox_fail(c, "%s: external data %s '%.40s' is not a byte count", what, e->key, e->value);
            if (is_off) *off = x;
            else *len = x;
        }
    }
    if (!loc || !loc[0]) return ox_fail(c, "%s: external data without a location", what);
    if (!c->dir) return ox_fail(c, "%s: external data '%.80s' but the model was not read from a file", what, loc);
    if (loc[0] == '/' || strstr(loc, "..")) return ox_fail(c, "%s: external data location '%.80s' leaves the model's folder", what, loc);
    if ((*fd = open_beneath(c, what, loc)) < 0) return -1;
    struct stat st;
    if (fstat(*fd, &st) < 0) {
        close(*fd);
        return ox_fail(c, "%s: external data '%.200s': %s", what, loc, strerror(errno));
    }
    if (*len < 0) *len = st.st_size - *off;
    if (*off > st.st_size || *len > st.st_size - *off) {
        close(*fd);
        return ox_fail(c, "%s: external data '%.200s/%.200s' holds %lld bytes, the tensor needs %lld from offset %lld", what, c->dir,
                       loc, (long long)st.st_size, (long long)*len, (long long)*off);
    }
    return 0;
}

static int read_all(int fd, void *buf, int64_t len, int64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = pread(fd, p, (size_t)(len > (1 << 30) ? (1 << 30) : len), (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        off += k;
        len -= k;
    }
    return 0;
}

/* Element i of raw little-endian bytes of `type`, as a double. */
static double raw_elem(int type, const unsigned char *b, int64_t i)
{
    const unsigned char *q = b + i * elem_bytes(type);
    uint64_t u = 0;
    for (int k = elem_bytes(type) - 1; k >= 0; k--) u = (u << 8) | q[k];
    switch (type) {
    case OX_FLOAT: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    case OX_DOUBLE: {
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    case OX_FLOAT16: return half_to_float((uint16_t)u);
    case OX_BFLOAT16: return bf16_to_float((uint16_t)u);
    case OX_INT8: return (int8_t)u;
    case OX_INT16: return (int16_t)u;
    case OX_INT32: return (int32_t)u;
    case OX_INT64: return (double)(int64_t)u;
    case OX_BOOL: return u != 0;
    default: return (double)u; /* unsigned */
    }
}

/* Calls put(i, value) for each of the n elements of p. */
typedef void (*put_fn)(void *ctx, int64_t i, double v);
static void put_double(void *ctx, int64_t i, double v);
static const put_fn put_double_fn = put_double;

/* Elements held in an external file: read in chunks (a tensor of GB is never held twice). */
static int read_external(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int64_t n, put_fn put, void *ctx)
{
    int type = p->data_type, eb = elem_bytes(type);
    int fd = -1;
    int64_t off, len;
    if (external_of(c, p, what, &fd, &off, &len) < 0) return -1;
    if (len != n * eb) {
        close(fd);
        return ox_fail(c, "%s: external data of %lld bytes for %lld elements of %s", what, (long long)len, (long long)n,
                       ox_type_name(type));
    }
    unsigned char *buf = ir_xrealloc(NULL, 1 << 20);
    int64_t per = (1 << 20) / eb, done = 0;
    while (done < n) {
        int64_t k = n - done < per ? n - done : per;
        if (read_all(fd, buf, k * eb, off + done * eb) < 0) {
            free(buf);
            close(fd);
            return ox_fail(c, "%s: external data: read failed: %s", what, errno ? strerror(errno) : "file too short");
        }
        if (put == put_double_fn && type == OX_FLOAT) /* little-endian floats, as the file holds them */
            for (int64_t i = 0; i < k; i++) {
                float f;
                memcpy(&f, buf + 4 * i, 4);
                ((double *)ctx)[done + i] = f;
            }
        else
            for (int64_t i = 0; i < k; i++) put(ctx, done + i, raw_elem(type, buf, i));
        done += k;
    }
    free(buf);
    close(fd);
    return 0;
}

/* Elements held as raw_data (little-endian, the type's width each). */
static int read_raw(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int64_t n, put_fn put, void *ctx)
{
    int type = p->data_type, eb = elem_bytes(type);
    if ((int64_t)p->raw_data.len != n * eb)
        return ox_fail(c, "%s: raw_data of %zu bytes for %lld elements of %s", what, p->raw_data.len, (long long)n,
                       ox_type_name(type));
    if (put == put_double_fn && type == OX_FLOAT) { /* the common case, without a call per element */
        const unsigned char *b = p->raw_data.data;
        double *dst = ctx;
        for (int64_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, b + 4 * i, 4);
            dst[i] = f;
        }
        return 0;
    }
    for (int64_t i = 0; i < n; i++) put(ctx, i, raw_elem(type, p->raw_data.data, i));
    return 0;
}

/* Elements held in the field of their type (float_data, int32_data, ...). */
static int read_typed(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int64_t n, put_fn put, void *ctx)
{
    int type = p->data_type;
    size_t have;
    switch (type) {
    case OX_FLOAT: have = p->n_float_data; break;
    case OX_DOUBLE: have = p->n_double_data; break;
    case OX_INT64: have = p->n_int64_data; break;
    case OX_UINT32: case OX_UINT64: have = p->n_uint64_data; break;
    default: have = p->n_int32_data; break; /* int32, int16, int8, uint16, uint8, bool, float16, bfloat16 */
    }
    if ((int64_t)have != n) return ox_fail(c, "%s: %zu values for %lld elements", what, have, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (type) {
        case OX_FLOAT: v = p->float_data[i]; break;
        case OX_DOUBLE: v = p->double_data[i]; break;
        case OX_INT64: v = (double)p->int64_data[i]; break;
        case OX_UINT32: case OX_UINT64: v = (double)p->uint64_data[i]; break;
        case OX_FLOAT16: v = half_to_float((uint16_t)p->int32_data[i]); break;
        case OX_BFLOAT16: v = bf16_to_float((uint16_t)p->int32_data[i]); break;
        case OX_BOOL: v = p->int32_data[i] != 0; break;
        default: v = p->int32_data[i]; break;
        }
        put(ctx, i, v);
    }
    return 0;
}

/* Calls put(i, value) for each of the n elements of p, wherever p holds them. */
static int read_elems(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int64_t n, put_fn put, void *ctx)
{
    if (p->segment) return ox_fail(c, "%s: segmented tensors are not supported", what);
    if (p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return read_external(c, p, what, n, put, ctx);
    if (p->has_raw_data) return read_raw(c, p, what, n, put, ctx);
    return read_typed(c, p, what, n, put, ctx);
}

static void put_double(void *ctx, int64_t i, double v) { ((double *)ctx)[i] = v; }
static void put_float(void *ctx, int64_t i, double v) { ((float *)ctx)[i] = (float)v; }

ox_tensor *ox_tensor_from_proto(ox_ctx *c, const Onnx__TensorProto *p, const char *what)
{
    int rank;
    int64_t dims[OX_MAX_RANK], n;
    if (ox_proto_shape(c, p, what, &rank, dims, &n) < 0) return NULL;
    ox_tensor *t = ox_tensor_new(c, p->data_type, rank, dims);
    if (!t) return NULL;
    if (read_elems(c, p, what, n, put_double, t->v) < 0) {
        ox_tensor_free(t);
        return NULL;
    }
    return t;
}

int ox_proto_read_f32(ox_ctx *c, const Onnx__TensorProto *p, const char *what, float *dst, int64_t n)
{
    return read_elems(c, p, what, n, put_float, dst);
}
