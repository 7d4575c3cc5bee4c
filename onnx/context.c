/* context.c - the import's context: errors, the value table, a node's
 * inputs and attributes (onnx/context.h, the reader's lowest room).
 *
 * Every ONNX value name (initializer, graph input, node output) has one slot
 * in c->vals, found by name through an open-addressing index; a node's
 * input k is the slot of its k-th name.  The first error recorded stops the
 * import: ox_fail prefixes the node being read and returns -1, so callers
 * return its result.
 */
#include "onnx/context.h"
#include "ir/hash.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

int ox_fail(ox_ctx *c, const char *fmt, ...)
{
    if (c->failed) return -1;
    c->failed = 1;
    if (!c->err || !c->errlen) return -1;
    size_t k = 0;
    const Onnx__NodeProto *n = c->node;
    if (n)
        k = (size_t)snprintf(c->err, c->errlen, "node '%.120s' (%.60s, opset %d): ", n->name && n->name[0] ? n->name : "(unnamed)",
                             n->op_type ? n->op_type : "?", c->opset);
    if (k < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->errlen - k, fmt, ap);
        va_end(ap);
    }
    for (char *p = c->err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

int ox_check_ir(ox_ctx *c)
{
    const char *e = ir_error(c->g);
    return e ? ox_fail(c, "%s", e) : 0;
}

int ox_is_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) return 0;
    return 1;
}

/* ---- the value table ------------------------------------------------------- */

static uint64_t hash_name(const char *s) { return ir_fnv(s); }

static void index_add(ox_ctx *c, int i)
{
    size_t mask = (size_t)c->index_cap - 1, k = hash_name(c->vals[i].name) & mask;
    while (c->index[k] >= 0) k = (k + 1) & mask;
    c->index[k] = i;
}

ox_val *ox_val_get(ox_ctx *c, const char *name)
{
    if (!c->index_cap || !name) return NULL;
    size_t mask = (size_t)c->index_cap - 1;
    for (size_t k = hash_name(name) & mask; c->index[k] >= 0; k = (k + 1) & mask)
        if (!strcmp(c->vals[c->index[k]].name, name)) return &c->vals[c->index[k]];
    return NULL;
}

ox_val *ox_val_put(ox_ctx *c, const char *name)
{
    if (c->n_vals == c->cap_vals) {
        c->cap_vals = c->cap_vals ? 2 * c->cap_vals : 256;
        c->vals = ir_xrealloc(c->vals, (size_t)c->cap_vals * sizeof *c->vals);
    }
    if (2 * (c->n_vals + 1) > c->index_cap) {
        int cap = 512;
        while (cap < 4 * (c->n_vals + 1)) cap *= 2;
        free(c->index);
        c->index = ir_xrealloc(NULL, (size_t)cap * sizeof(int));
        for (int i = 0; i < cap; i++) c->index[i] = -1;
        c->index_cap = cap;
        for (int i = 0; i < c->n_vals; i++) index_add(c, i);
    }
    ox_val *v = &c->vals[c->n_vals];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->ir = -1;
    v->init = -1;
    v->layer = -1;
    index_add(c, c->n_vals++);
    return v;
}

int ox_n_in(const Onnx__NodeProto *n)
{
    int k = (int)n->n_input;
    while (k > 0 && (!n->input[k - 1] || !n->input[k - 1][0])) k--;
    return k;
}

ox_val *ox_in(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    if (k >= (int)n->n_input || !n->input[k] || !n->input[k][0]) return NULL;
    ox_val *v = ox_val_get(c, n->input[k]);
    if (!v || v->kind == OX_UNSET) {
        ox_fail(c, "input %d '%.120s' is not made by an earlier node, an initializer or a graph input", k, n->input[k]);
        return NULL;
    }
    return v;
}

/* ---- attributes --------------------------------------------------------------- */

const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}

int64_t ox_attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    return a && a->has_i ? a->i : dflt;
}

double ox_attr_float(const Onnx__NodeProto *n, const char *name, double dflt)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    return a && a->has_f ? a->f : dflt;
}

int ox_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    if (!a) return -1;
    int k = (int)(a->n_ints < (size_t)max ? a->n_ints : (size_t)max);
    for (int i = 0; i < k; i++) out[i] = a->ints[i];
    return a->n_ints > (size_t)max ? max + 1 : k;
}

const char *ox_attr_str(const Onnx__NodeProto *n, const char *name, char *buf, size_t len)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    size_t k = a && a->has_s ? a->s.len : 0;
    if (k >= len) k = len - 1;
    if (k) memcpy(buf, a->s.data, k);
    buf[k] = 0;
    return buf;
}

const char *ox_attr_listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    if (strpbrk(name, "= ")) return NULL;
    for (const char *p = list; len && (p = strstr(p, name)); p += len)
        if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '=' || !p[len])) return p;
    return NULL;
}

double ox_attr_float_listed(const Onnx__NodeProto *n, const char *name, const char *list)
{
    const char *p = list ? ox_attr_listed(list, name) : NULL;
    double dflt = p && p[strlen(name)] == '=' ? strtod(p + strlen(name) + 1, NULL) : 0;
    return ox_attr_float(n, name, dflt);
}
