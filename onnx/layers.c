/* layers.c - repeated blocks found from the exporter's names.
 *
 * torch 1.13 names each node after the modules it was called in:
 * "/h.3/attn/c_attn/Gemm", "/layer1/layer1.0/conv1/Conv",
 * "/transformer/h.11/mlp/Add".  A component "NAME.K" (K digits) is element K
 * of a ModuleList or Sequential NAME; the first such component, with the
 * path before it, identifies the block ("h.3", "layer1.0", "transformer.h.11";
 * torch repeats a Sequential's own name before its elements, "layer1/layer1.0",
 * which is dropped).  State-dict names ("h.3.attn.c_attn.weight",
 * "layer1.0.conv1.weight") give the same key: the path up to the first
 * ".K." segment.  Blocks are numbered in the order their first node comes;
 * nodes outside every block, and initializers used by nodes of several
 * blocks or named otherwise ("onnx::MatMul_928"), take the layer of the
 * nodes that use them, or none (-1).
 *
 * torch 2's default exporter names nodes "node_MatMul_79" and writes the
 * module scopes into each node's metadata instead
 * ("pkg.torch.onnx.name_scopes": ['', 'transformer', 'transformer.h.0',
 * 'transformer.h.0.attn', ...]): the first scope whose last component is
 * K gives the key ("transformer.h.0"), as a scoped name would.  An element
 * that holds no params (a ReLU or a Dropout in an nn.Sequential) is no
 * block: its nodes stay outside the layers.
 */
#include "onnx/steps.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LEN 160

/* 1 when s[0..n) is "NAME.DIGITS" */
static int numbered(const char *s, size_t n)
{
    size_t d = n;
    while (d > 0 && isdigit((unsigned char)s[d - 1])) d--;
    return d < n && d >= 2 && s[d - 1] == '.';
}

/* The block key of a node name ("" when none). */
static void node_key(const char *name, char *key)
{
    key[0] = 0;
    if (!name || name[0] != '/') return;
    const char *p = name + 1, *prev = NULL;
    size_t prev_len = 0, k = 0;
    char path[KEY_LEN] = "";
    while (*p) {
        const char *slash = strchr(p, '/');
        if (!slash) return; /* the last component is the op itself */
        size_t len = (size_t)(slash - p);
        if (numbered(p, len)) {
            /* "layer1/layer1.0": the Sequential's own component goes */
            if (prev && prev_len < len && !strncmp(prev, p, prev_len) && p[prev_len] == '.') {
                size_t cut = k >= prev_len + 1 ? k - prev_len - 1 : 0;
                k = cut;
                path[k] = 0;
            }
            if (k + len + 2 >= KEY_LEN) return;
            if (k) path[k++] = '.';
            memcpy(path + k, p, len);
            path[k + len] = 0;
            strcpy(key, path);
            return;
        }
        if (k + len + 2 >= KEY_LEN) return;
        if (k) path[k++] = '.';
        memcpy(path + k, p, len);
        k += len;
        path[k] = 0;
        prev = p;
        prev_len = len;
        p = slash + 1;
    }
}

/* The block key from a node's module scopes (torch 2's metadata, a Python
 * list of dotted paths): the first path whose last component is digits. */
static void scope_key(const Onnx__NodeProto *n, char *key)
{
    key[0] = 0;
    const char *list = NULL;
    for (size_t i = 0; i < n->n_metadata_props && !list; i++) {
        const Onnx__StringStringEntryProto *e = n->metadata_props[i];
        if (e->key && e->value && !strcmp(e->key, "pkg.torch.onnx.name_scopes")) list = e->value;
    }
    for (const char *p = list ? strchr(list, '\'') : NULL; p; p = strchr(p, '\'')) {
        const char *q = strchr(p + 1, '\'');
        if (!q) return;
        size_t len = (size_t)(q - p - 1);
        if (numbered(p + 1, len) && len < KEY_LEN) {
            memcpy(key, p + 1, len);
            key[len] = 0;
            return;
        }
        p = q + 1;
    }
}

/* The block key of a state_dict name ("" when none): up to the first
 * ".DIGITS." segment. */
static void init_key(const char *name, char *key)
{
    key[0] = 0;
    for (const char *p = strchr(name, '.'); p; p = strchr(p + 1, '.')) {
        const char *q = p + 1;
        while (isdigit((unsigned char)*q)) q++;
        if (q > p + 1 && *q == '.' && (size_t)(q - name) < KEY_LEN) {
            memcpy(key, name, (size_t)(q - name));
            key[q - name] = 0;
            return;
        }
    }
}

/* 1 when block key `key` holds params: an initializer named under it, or one
 * read by a node tagged with it. */
static int holds_params(ox_ctx *c, const char (*keys)[KEY_LEN], int k, const int *node_key)
{
    const Onnx__GraphProto *gp = c->graph;
    for (int v = 0; v < c->n_vals; v++) {
        char key[KEY_LEN];
        if (c->vals[v].kind != OX_INIT) continue;
        init_key(c->vals[v].name, key);
        if (!strcmp(key, keys[k])) return 1;
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        if (node_key[i] != k) continue;
        for (size_t j = 0; j < gp->node[i]->n_input; j++) {
            ox_val *v = gp->node[i]->input[j] && gp->node[i]->input[j][0] ? ox_val_get(c, gp->node[i]->input[j]) : NULL;
            if (v && v->kind == OX_INIT && ox_type_is_float(v->type)) return 1;
        }
    }
    return 0;
}

void ox_layers(ox_ctx *c)
{
    const Onnx__GraphProto *gp = c->graph;
    int nn = (int)gp->n_node;
    c->node_layer = ir_xcalloc((size_t)nn + 1, sizeof(int));
    char (*keys)[KEY_LEN] = ir_xcalloc((size_t)nn + 1, KEY_LEN);
    int n_keys = 0;
    for (int i = 0; i < nn; i++) {
        char key[KEY_LEN];
        node_key(gp->node[i]->name, key);
        if (!key[0]) scope_key(gp->node[i], key);
        c->node_layer[i] = -1;
        if (!key[0]) continue;
        int k = 0;
        while (k < n_keys && strcmp(keys[k], key)) k++;
        if (k == n_keys) strcpy(keys[n_keys++], key);
        c->node_layer[i] = k;
    }
    /* blocks are the keys that hold params, numbered again in order */
    int *renum = ir_xcalloc((size_t)n_keys + 1, sizeof(int)), kept = 0;
    for (int k = 0; k < n_keys; k++) {
        renum[k] = holds_params(c, keys, k, c->node_layer) ? kept : -1;
        if (renum[k] >= 0) memmove(keys[kept++], keys[k], KEY_LEN);
    }
    for (int i = 0; i < nn; i++)
        if (c->node_layer[i] >= 0) c->node_layer[i] = renum[c->node_layer[i]];
    free(renum);
    n_keys = kept;
    /* initializers: by name, else by the nodes that read them */
    for (int v = 0; v < c->n_vals; v++) {
        ox_val *x = &c->vals[v];
        if (x->kind != OX_INIT) continue;
        char key[KEY_LEN];
        init_key(x->name, key);
        x->layer = -1;
        for (int k = 0; key[0] && k < n_keys; k++)
            if (!strcmp(keys[k], key)) x->layer = k;
        if (x->layer >= 0 || key[0]) continue;
        int layer = -2;
        for (int i = 0; i < nn && layer != -1; i++)
            for (size_t j = 0; j < gp->node[i]->n_input; j++)
                if (gp->node[i]->input[j] && !strcmp(gp->node[i]->input[j], x->name))
                    layer = layer == -2 || layer == c->node_layer[i] ? c->node_layer[i] : -1;
        x->layer = layer < 0 ? -1 : layer;
    }
    c->n_layers = n_keys;
    free(keys);
}
