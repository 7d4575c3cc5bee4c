/* test_onnx_nodes.c - the ONNX node tests of libonnx-testdata against
 * carve's reader: each test is a one-op model (or its expansion into
 * several ops) with inputs and expected outputs.
 *
 * Each test runs twice where it can:
 *   emit   the inputs are data: the node becomes carve ops, run by the
 *          reference executor (inputs that carve needs as constants, such
 *          as a Reshape's shape or Slice's starts, are given by value when
 *          the first try is refused for that);
 *   fold   every input is given by value: the node is folded at import
 *          (onnx/fold.c) where its op has a folder.
 * A test imports (every op in carve's table, at an opset whose version
 * carve implements, types carve computes) or is refused with a message; a
 * test that imports must produce the expected outputs within the node
 * tests' tolerance (|got - want| <= 1e-7 + 1e-3 |want|, the ONNX backend
 * runner's defaults).  So every op carve accepts is checked on all of its
 * tests it accepts; refusals are counted per reason.
 * CARVE_ONNX_NODES=DIR reads another folder; CARVE_ONNX_NODES_TABLE=FILE
 * writes the per-op table (docs/onnx.md); -v prints every test.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exec/exec.h"
#include "onnx/onnx.h"
#include "tests/test.h"

#define DEFAULT_DIR "/usr/share/libonnx-testdata/data/node"
#define MAX_IO 16

typedef struct op_count {
    char op[48];
    int tests, emit_ok, fold_ok, refused;
} op_count;

static op_count ops[256];
static int n_ops, verbose;
/* refusals of tests whose op carve reads: "name: reason" */
static char *refusals[1024];
static int n_refusals;

static op_count *count_of(const char *op)
{
    for (int i = 0; i < n_ops; i++)
        if (!strcmp(ops[i].op, op)) return &ops[i];
    if (n_ops == 256) return &ops[255];
    snprintf(ops[n_ops].op, sizeof ops[n_ops].op, "%.47s", op);
    return &ops[n_ops++];
}


/* Tests whose expected outputs carve does not compute, by design: run and
 * reported, not counted as matches (docs/onnx.md). */
static const char *const differs[][2] = {
    {"test_cast_FLOAT_to_BFLOAT16", "ONNX 1.12's data truncate to bfloat16; carve rounds to nearest even, as torch does"},
    {"test_castlike_FLOAT_to_BFLOAT16", "ONNX 1.12's data truncate to bfloat16; carve rounds to nearest even, as torch does"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "ONNX 1.12's data truncate to bfloat16; carve rounds to nearest even, as torch does"},
    {"test_training_dropout", "a training-mode dropout draws carve's counter-based mask, not the test's random stream"},
    {"test_training_dropout_default", "a training-mode dropout draws carve's counter-based mask, not the test's random stream"},
    {"test_training_dropout_mask", "a training-mode dropout draws carve's counter-based mask, not the test's random stream"},
    {"test_training_dropout_default_mask", "a training-mode dropout draws carve's counter-based mask, not the test's random stream"},
};

static const char *differs_why(const char *name)
{
    for (size_t i = 0; i < sizeof differs / sizeof differs[0]; i++)
        if (!strcmp(differs[i][0], name)) return differs[i][1];
    return NULL;
}

typedef struct io {
    onnx_tensor t[MAX_IO];
    int n;
} io;

static int read_io(const char *dir, const char *prefix, io *x)
{
    char path[1024], err[512];
    x->n = 0;
    for (int k = 0; k < MAX_IO; k++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/%s_%d.pb", dir, prefix, k);
        struct stat st;
        if (stat(path, &st) < 0) break;
        if (onnx_tensor_read(path, &x->t[x->n], err, sizeof err) < 0) return -1;
        x->n++;
    }
    return 0;
}

static void io_free(io *x)
{
    for (int k = 0; k < x->n; k++) onnx_tensor_free(&x->t[k]);
}

/* 1 when every output of a run matches. */
static int outputs_match(const ir_graph *g, exec_ref *r, const io *want, char *why, size_t n)
{
    if (g->n_outputs != want->n) return snprintf(why, n, "%d outputs, %d expected", g->n_outputs, want->n), 0;
    for (int k = 0; k < want->n; k++) {
        const ir_value *v = &g->values[g->outputs[k].value];
        onnx_tensor conv = want->t[k];
        const onnx_tensor *t = &conv;
        if (t->elem_type == 4 && v->dtype == IR_BF16) { /* numpy has no bfloat16: the test stores its bits as uint16 */
            float *f = malloc((size_t)t->n * 4 + 4);
            for (int64_t i = 0; i < t->n; i++) {
                uint32_t u = (uint32_t)((const int32_t *)t->data)[i] << 16;
                memcpy(&f[i], &u, 4);
            }
            conv.data = f;
            conv.is_int = 0;
        }
        if (ir_numel(v) != t->n) return snprintf(why, n, "output %d has %lld elements, %lld expected", k, (long long)ir_numel(v), (long long)t->n), 0;
        const void *got = exec_ref_data(r, g->outputs[k].value);
        for (int64_t i = 0; i < t->n; i++) {
            double a = v->dtype == IR_I32 ? ((const int32_t *)got)[i] : ((const float *)got)[i];
            double b = t->is_int ? ((const int32_t *)t->data)[i] : ((const float *)t->data)[i];
            if (isnan(a) && isnan(b)) continue;
            if (isinf(b) && a == b) continue;
            if (!(fabs(a - b) <= 1e-7 + 1e-3 * fabs(b))) {
                if (conv.data != want->t[k].data) free(conv.data);
                return snprintf(why, n, "output %d element %lld is %.9g, expected %.9g", k, (long long)i, a, b), 0;
            }
        }
        if (conv.data != want->t[k].data) free(conv.data);
    }
    return 1;
}

/* Imports the test with the inputs in `known` given by value, runs it and
 * compares.  Returns 1 (match), 0 (mismatch: a failure), -1 (refused, the
 * message in why). */
static int run_one(const char *dir, const io *in, const io *out, int mode, char *why, size_t n, char *op_types, size_t on)
{
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    onnx_tensor known[MAX_IO];
    int nk = 0;
    for (int k = 0; k < in->n; k++)
        if (mode == 2 || (mode == 1 && in->t[k].is_int) || (mode == 3 && k > 0)) known[nk++] = in->t[k];
    onnx_options o = {.outputs = 1, .opset_lo = 1, .known = known, .n_known = nk};
    onnx_info info;
    ir_graph *g = onnx_import(path, &o, &info, err, sizeof err);
    if (op_types) snprintf(op_types, on, "%s", info.op_types[0] ? info.op_types : "?");
    if (!g) {
        snprintf(why, n, "%s", err);
        return -1;
    }
    int rc = 1;
    /* the inputs still data, by name (onnx_tensor names are the graph's input names) */
    for (int k = 0; k < in->n && rc == 1; k++) {
        int v = ir_find(g, in->t[k].name);
        if (v < 0 || g->values[v].role != IR_INPUT) continue;
        onnx_tensor t = in->t[k];
        float *bf = NULL;
        if (t.elem_type == 4 && g->values[v].dtype == IR_BF16) { /* bfloat16 stored as uint16 bits */
            bf = malloc((size_t)t.n * 4 + 4);
            for (int64_t i = 0; i < t.n; i++) {
                uint32_t u = (uint32_t)((const int32_t *)t.data)[i] << 16;
                memcpy(&bf[i], &u, 4);
            }
            t.data = bf;
            t.is_int = 0;
        }
        if (ir_numel(&g->values[v]) != t.n || (g->values[v].dtype == IR_I32) != t.is_int) {
            snprintf(why, n, "input '%s' does not fit", in->t[k].name);
            rc = -1;
        } else ir_data_set(g, v, t.data, t.n);
        free(bf);
    }
    exec_ref *r = rc == 1 ? exec_ref_new(g, (size_t)1 << 30, err, sizeof err) : NULL;
    if (rc == 1 && !r) snprintf(why, n, "%s", err), rc = -1;
    if (r) {
        exec_ref_init_args(r, 1);
        /* ids from the data outside a table stop a run with an error, by design (docs/onnx.md):
           refused at run time, not a wrong result */
        if (exec_ref_run(r, err, sizeof err) < 0) snprintf(why, n, "run: %s", err), rc = strstr(err, "outside the table's rows") ? -1 : 0;
        else rc = outputs_match(g, r, out, why, n);
        exec_ref_free(r);
    }
    ir_free(g);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    verbose = argc > 1 && !strcmp(argv[1], "-v");
    exec_blis_setup();
    const char *root = getenv("CARVE_ONNX_NODES") ? getenv("CARVE_ONNX_NODES") : DEFAULT_DIR;
    DIR *d = opendir(root);
    if (!d) { /* a component build.sh installs: missing is a failure, a skip only where asked */
        const char *without = getenv("CARVE_TEST_WITHOUT");
        int skip = without && strstr(without, "onnx-testdata");
        printf("%s: %s not found (apt-get install -y libonnx-testdata%s); the ONNX node tests were not run\n",
               skip ? "skip" : "FAIL", root, skip ? "" : "; CARVE_TEST_WITHOUT=onnx-testdata to skip");
        printf("0 passed, %d failed%s\n", !skip, skip ? ", 1 skipped" : "");
        return !skip;
    }
    char **names = NULL;
    int n_names = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "test_", 5)) continue;
        names = realloc(names, (size_t)(n_names + 1) * sizeof *names);
        names[n_names++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_names, sizeof *names, by_name);
    int imported = 0, refused = 0, emit_ok = 0, fold_ok = 0, fold_tried = 0, differ = 0;
    for (int i = 0; i < n_names; i++) {
        char dir[1024], op[256] = "?", why[1536];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        io in, out;
        if (read_io(dir, "input", &in) < 0 || read_io(dir, "output", &out) < 0 || !out.n) {
            /* a tensor type carve's reader does not hold (strings, sequences) */
            io_free(&in);
            io_free(&out);
            refused++;
            if (verbose) printf("refused %s: its data are not tensors carve reads\n", names[i]);
            free(names[i]);
            continue;
        }
        int rc = run_one(dir, &in, &out, 0, why, sizeof why, op, sizeof op);
        /* refused with the inputs as data: given by value those carve may need so (shapes, axes,
           empty tensors): the integer ones, then all but the first, then all */
        char why0[1536];
        snprintf(why0, sizeof why0, "%s", why);
        for (int mode = 1; mode <= 3 && rc < 0 && !strstr(why0, "unsupported op"); mode++)
            rc = run_one(dir, &in, &out, mode == 2 ? 3 : mode == 3 ? 2 : 1, why, sizeof why, NULL, 0);
        if (rc < 0) snprintf(why, sizeof why, "%s", why0);
        op_count *oc = count_of(strchr(op, ' ') ? "(several ops)" : op);
        oc->tests++;
        if (rc < 0) {
            refused++;
            oc->refused++;
            if (verbose) printf("refused %s: %s\n", names[i], why);
            const char *r = strstr(why, "): ") ? strstr(why, "): ") + 3 : strstr(why, ".onnx: ") ? strstr(why, ".onnx: ") + 7 : why;
            if (!strstr(why, "unsupported op") && !strstr(why, "not supported (carve reads it at other opsets)") &&
                !strstr(why, "no opset of the default") && n_refusals < 1024) {
                char line[700];
                snprintf(line, sizeof line, "%.150s (%.300s): %.200s", names[i] + 5, op, r);
                refusals[n_refusals++] = strdup(line);
            }
        } else if (differs_why(names[i])) {
            differ++;
            printf("differs by design: %s (%s): %s\n", names[i], rc == 1 ? "matches" : why, differs_why(names[i]));
        } else {
            imported++;
            CHECKF(rc == 1, "%s (inputs as data): %s", names[i], why);
            emit_ok += rc == 1;
            oc->emit_ok += rc == 1;
            if (verbose && rc == 1) printf("ok      %s\n", names[i]);
            /* every input by value: the folder */
            char why2[1536];
            int rf = run_one(dir, &in, &out, 2, why2, sizeof why2, NULL, 0);
            if (rf >= 0) {
                fold_tried++;
                CHECKF(rf == 1, "%s (inputs as constants, folded): %s", names[i], why2);
                fold_ok += rf == 1;
                oc->fold_ok += rf == 1;
            }
        }
        io_free(&in);
        io_free(&out);
        free(names[i]);
    }
    free(names);
    printf("node tests in %s: %d imported (%d match with inputs as data), %d refused, %d differ by design; folded with inputs as "
           "constants: %d of %d match\n",
           root, imported, emit_ok, refused, differ, fold_ok, fold_tried);
    CHECKF(imported >= 500, "only %d node tests imported", imported);
    const char *table = getenv("CARVE_ONNX_NODES_TABLE");
    FILE *f = table ? fopen(table, "w") : NULL;
    if (f) {
        fprintf(f, "| op | tests | imported, outputs match | folded, outputs match | refused |\n|---|---|---|---|---|\n");
        for (int i = 0; i < n_ops; i++)
            if (ops[i].tests > ops[i].refused)
                fprintf(f, "| %s | %d | %d | %d | %d |\n", ops[i].op, ops[i].tests, ops[i].emit_ok, ops[i].fold_ok, ops[i].refused);
        fprintf(f, "\nTests of ops carve reads that it refuses, and why:\n\n");
        for (int i = 0; i < n_refusals; i++) fprintf(f, "- `%s`\n", refusals[i]);
        fprintf(f, "\nTests that differ by design:\n\n");
        for (size_t i = 0; i < sizeof differs / sizeof differs[0]; i++) fprintf(f, "- `%s`: %s\n", differs[i][0] + 5, differs[i][1]);
        fclose(f);
    }
    for (int i = 0; i < n_refusals; i++) free(refusals[i]);
    return test_done();
}
