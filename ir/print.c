/* print.c - the text form of a graph: arguments, then one op a line, then the
 * outputs.  Tests compare printer output (JSON round trips), and `carve show
 * --ops` and the SPMD printer build on it through the annotation hook.  Also
 * the nearest-name suggestion ("did you mean ...?") that the command line and
 * the model zoo give for a misspelled name. */
#include "ir.h"

#include <string.h>

static size_t attrs_str(const ir_op *o, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    unsigned f = ir_op_attrs(o->kind);
    if (f & IR_ATTR_SCALAR) k += (size_t)snprintf(buf + k, n - k, " %.9g", o->attrs.scalar);
    if (f & IR_ATTR_SUBSCRIPTS) k += (size_t)snprintf(buf + k, n - k, " \"%s\"", o->attrs.subscripts);
    if (o->attrs.n_ints && k < n) {
        k += (size_t)snprintf(buf + k, n - k, " [");
        for (int i = 0; i < o->attrs.n_ints && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)o->attrs.ints[i]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
    }
    return k;
}

char *ir_op_str(const ir_graph *g, int op, char *buf, size_t n)
{
    const ir_op *o = &g->ops[op];
    const ir_value *out = &g->values[o->out];
    char at[128], ty[96];
    attrs_str(o, at, sizeof at);
    size_t k = (size_t)snprintf(buf, n, "%s = %s%s(", out->name, ir_op_name(o->kind), at);
    for (int i = 0; i < o->n_in && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", g->values[o->in[i]].name);
    if (k < n) k += (size_t)snprintf(buf + k, n - k, ") : %s", ir_type_str(out, ty, sizeof ty));
    if (o->layer >= 0 && k < n) snprintf(buf + k, n - k, " @%d", o->layer);
    return buf;
}

void ir_print_ex(const ir_graph *g, FILE *f, ir_annot_fn annot, void *ctx)
{
    char buf[512], ty[96], an[256];
    fprintf(f, "graph %s: %d values, %d ops, %d layers\n", g->name, g->n_values, g->n_ops, g->n_layers);
    fprintf(f, "args:\n");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        fprintf(f, "  %s : %s %s", x->name, ir_role_name(x->role), ir_type_str(x, ty, sizeof ty));
        if (x->layer >= 0) fprintf(f, " @%d", x->layer);
        if (x->tied >= 0) fprintf(f, " tied %s", g->values[x->tied].name);
        const char *s = annot ? annot(ctx, g, v, an, sizeof an) : NULL;
        if (s) fprintf(f, "  %s", s);
        fputc('\n', f);
    }
    fprintf(f, "ops:\n");
    for (int i = 0; i < g->n_ops; i++) {
        fprintf(f, "  %s", ir_op_str(g, i, buf, sizeof buf));
        int v = g->ops[i].out;
        if (g->values[v].grad_of >= 0) fprintf(f, " grad %s", g->values[g->values[v].grad_of].name);
        const char *s = annot ? annot(ctx, g, v, an, sizeof an) : NULL;
        if (s) fprintf(f, "  %s", s);
        fputc('\n', f);
    }
    fprintf(f, "outputs:\n");
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        fprintf(f, "  %s", g->values[o->value].name);
        if (o->updates >= 0) fprintf(f, " -> %s", g->values[o->updates].name);
        if (o->value == g->loss) fprintf(f, " (loss)");
        fputc('\n', f);
    }
}

void ir_print(const ir_graph *g, FILE *f) { ir_print_ex(g, f, NULL, NULL); }

/* Levenshtein distance of a and b (each at most 63 bytes; longer: far). */
static int edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

const char *ir_nearest(const char *w, const char *words)
{
    static _Thread_local char best[64]; /* one per thread, so callers on several threads do not race */
    int best_d = 99;
    char word[64];
    for (const char *p = words; *p;) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (n && n < sizeof word) {
            memcpy(word, p, n);
            word[n] = 0;
            int d = edit_distance(w, word);
            if (d < best_d) {
                best_d = d;
                strcpy(best, word);
            }
        }
        p += n;
    }
    size_t len = strlen(w);
    return best_d <= 2 && (size_t)best_d * 2 < len ? best : NULL;
}
