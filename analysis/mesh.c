/* mesh.c - device meshes and tensor shardings: parsing, local shapes, text.
 * A mesh is a few named axes; a shard_spec lists per dim the axes tiling it.
 * Everything here is a pure function of small structs. */
#include "shard.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int shard_mesh_parse(const char *text, shard_mesh *m, char *err, size_t errlen)
{
    static const char *const defaults[SHARD_MAX_AXES] = {"batch", "model", "x2", "x3"};
    memset(m, 0, sizeof *m);
    if (!text || !*text) return ir_errf(err, errlen, "mesh: empty mesh%s (write e.g. batch=4,model=2)", "");
    int shorthand = strchr(text, '=') == NULL;
    const char *p = text;
    while (*p) {
        if (m->n_axes == SHARD_MAX_AXES) return ir_errf(err, errlen, "mesh '%s': more than 4 axes", text);
        char *name = m->names[m->n_axes];
        if (!shorthand) {
            size_t k = 0;
            while (*p && *p != '=' && *p != ',') {
                if (!(isalnum((unsigned char)*p) || *p == '_')) return ir_errf(err, errlen, "mesh '%s': axis names take letters, digits and _", text);
                if (k + 1 >= SHARD_AXIS_NAME) return ir_errf(err, errlen, "mesh '%s': axis name too long (15 characters at most)", text);
                name[k++] = *p++;
            }
            name[k] = 0;
            if (!k || *p != '=') return ir_errf(err, errlen, "mesh '%s': expected name=size for each axis", text);
            if (isdigit((unsigned char)name[0])) return ir_errf(err, errlen, "mesh '%s': axis names must not start with a digit", text);
            p++;
        } else {
            strcpy(name, defaults[m->n_axes]);
        }
        if (!isdigit((unsigned char)*p)) return ir_errf(err, errlen, "mesh '%s': axis size must be a positive integer", text);
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno || v < 1 || v > SHARD_MAX_DEVICES)
            return ir_errf(err, errlen, "mesh '%s': axis size must be in 1..%d", text, SHARD_MAX_DEVICES);
        m->sizes[m->n_axes] = v;
        for (int i = 0; i < m->n_axes; i++)
            if (!strcmp(m->names[i], name)) return ir_errf(err, errlen, "mesh '%s': axis name repeated", text);
        m->n_axes++;
        p = end;
        char sep = shorthand ? 'x' : ',';
        if (*p == sep && p[1]) p++;
        else if (*p) return ir_errf(err, errlen, "mesh '%s': unexpected text after an axis size", text);
    }
    m->n_devices = 1;
    for (int i = 0; i < m->n_axes; i++)
        if (ir_mul_i64(m->n_devices, m->sizes[i], &m->n_devices) < 0 || m->n_devices > SHARD_MAX_DEVICES)
            return ir_errf(err, errlen, "mesh '%s': more than %d devices", text, SHARD_MAX_DEVICES);
    return 0;
}

int shard_mesh_axis(const shard_mesh *m, const char *name)
{
    for (int i = 0; i < m->n_axes; i++)
        if (!strcmp(m->names[i], name)) return i;
    return -1;
}

char *shard_mesh_str(const shard_mesh *m, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_axes && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s=%lld", i ? "," : "", m->names[i], (long long)m->sizes[i]);
    return buf;
}

int64_t shard_axes_size(const shard_mesh *m, unsigned mask)
{
    int64_t p = 1;
    for (int a = 0; a < m->n_axes; a++)
        if (mask & (1u << a)) ir_mul_i64(p, m->sizes[a], &p);
    return p;
}

int64_t shard_device_coord(const shard_mesh *m, int64_t dev, int a)
{
    for (int i = m->n_axes - 1; i > a; i--) dev /= m->sizes[i];
    return dev % m->sizes[a];
}

unsigned shard_spec_tiled(const shard_spec *s, int rank)
{
    unsigned mask = 0;
    for (int d = 0; d < rank; d++)
        for (int i = 0; i < s->n[d]; i++) mask |= 1u << s->axes[d][i];
    return mask;
}

int64_t shard_dim_shards(const shard_mesh *m, const shard_spec *s, int d)
{
    int64_t p = 1;
    for (int i = 0; i < s->n[d]; i++) ir_mul_i64(p, m->sizes[s->axes[d][i]], &p);
    return p;
}

/* Uneven splits are padded, as GSPMD does: a dim of size D tiled by axes
 * n1..nk (major to minor) is cut into blocks level by level: b0 = D and
 * b_i = ceil(b_{i-1} / n_i), so the block of every device has the same
 * size b_k, and a block of level i holds the n_{i+1} blocks of level i+1
 * (gathering the minor axis gives back the level above, with no data
 * crossing between its blocks).  A block's rows past the end of the block
 * above it (or of the dim) are padding: zeros that hold no data.  When every
 * level divides, this is the plain even split. */
int64_t shard_dim_block(const shard_mesh *m, const shard_spec *s, int d, int64_t size)
{
    int64_t b = size;
    for (int i = 0; i < s->n[d]; i++) {
        int64_t k = m->sizes[s->axes[d][i]];
        b = (b + k - 1) / k;
    }
    return b;
}

void shard_local_dims(const shard_mesh *m, const ir_value *v, const shard_spec *s, int64_t *dims)
{
    for (int d = 0; d < v->rank; d++) dims[d] = shard_dim_block(m, s, d, v->dims[d]);
}

size_t shard_local_bytes(const shard_mesh *m, const ir_value *v, const shard_spec *s)
{
    int64_t dims[IR_MAX_RANK];
    shard_local_dims(m, v, s, dims);
    size_t n = ir_dtype_size(v->dtype);
    for (int d = 0; d < v->rank; d++) ir_mul_size(n, (size_t)dims[d], &n);
    return n;
}

/* Walks the levels of dim d for device dev: its block's offset and the
 * number of its rows that hold data. */
static int64_t dim_walk(const shard_mesh *m, const ir_value *v, const shard_spec *s, int d, int64_t dev, int64_t *valid)
{
    int64_t org = 0, b = v->dims[d], end = v->dims[d];
    for (int i = 0; i < s->n[d]; i++) {
        int a = s->axes[d][i];
        b = (b + m->sizes[a] - 1) / m->sizes[a];
        org += shard_device_coord(m, dev, a) * b;
        if (org + b < end) end = org + b;
    }
    *valid = end > org ? end - org : 0;
    return org;
}

int64_t shard_dim_offset(const shard_mesh *m, const ir_value *v, const shard_spec *s, int d, int64_t dev)
{
    int64_t valid;
    return dim_walk(m, v, s, d, dev, &valid);
}

int64_t shard_dim_valid(const shard_mesh *m, const ir_value *v, const shard_spec *s, int d, int64_t dev)
{
    int64_t valid;
    dim_walk(m, v, s, d, dev, &valid);
    return valid;
}

int shard_split_ok(int64_t size, int64_t shards) { return size % shards == 0 || size >= shards; }

int shard_spec_equal(const shard_spec *a, const shard_spec *b, int rank)
{
    if (a->partial != b->partial || a->partial_max != b->partial_max) return 0;
    for (int d = 0; d < rank; d++) {
        if (a->n[d] != b->n[d]) return 0;
        for (int i = 0; i < a->n[d]; i++)
            if (a->axes[d][i] != b->axes[d][i]) return 0;
    }
    return 1;
}

char *shard_spec_str(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && k < n; d++) {
        k += (size_t)snprintf(buf + k, n - k, "%s{", d ? ", " : "");
        for (int i = 0; i < s->n[d] && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", m->names[s->axes[d][i]]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "}");
    }
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
    if (s->partial && k < n) {
        k += (size_t)snprintf(buf + k, n - k, " partial%s{", s->partial_max == s->partial ? "-max" : "");
        int first = 1;
        for (int a = 0; a < m->n_axes && k < n; a++)
            if (s->partial & (1u << a)) {
                k += (size_t)snprintf(buf + k, n - k, "%s%s", first ? "" : ",", m->names[a]);
                first = 0;
            }
        if (k < n) snprintf(buf + k, n - k, "}");
    }
    return buf;
}

char *shard_spec_pspec(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && k < n; d++) {
        if (d) k += (size_t)snprintf(buf + k, n - k, ", ");
        if (s->n[d] == 0) k += (size_t)snprintf(buf + k, n - k, "null");
        else if (s->n[d] == 1) k += (size_t)snprintf(buf + k, n - k, "\"%s\"", m->names[s->axes[d][0]]);
        else {
            k += (size_t)snprintf(buf + k, n - k, "[");
            for (int i = 0; i < s->n[d] && k < n; i++)
                k += (size_t)snprintf(buf + k, n - k, "%s\"%s\"", i ? ", " : "", m->names[s->axes[d][i]]);
            if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
        }
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}
