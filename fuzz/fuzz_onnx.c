/* fuzz_onnx.c - the ONNX reader (onnx_import_bytes): the bytes as a
 * ModelProto, imported with its weights.  A model that imports must verify,
 * save as a carve-graph/1 file and load back to the same text, and (with a
 * loss) get its training step derived; a model without a scalar output is
 * imported again with its outputs kept (as the node tests are).  Folded
 * constants are capped at 2^16 elements here (and 16 times that in all), so
 * a shape of 10^12 elements is a refusal, not a long allocation.  What
 * imports is also rewritten by ir_unmerge, as session/load.c rewrites every
 * import, and the rewrite (or its one-line refusal) checked the same way.
 *
 * The model's folder is a temporary one made at the first input, so that
 * external data is read too: ext.bin (8 bytes: the float pair 0.5, -2), a
 * fifo (which blocked open() for ever), `link` (a symbolic link to
 * /etc/passwd) and `d` (one to /etc): fuzz/seeds/onnx/ext-*.onnx name them
 * (issue 43).  Nothing outside it can be reached: a location that is
 * absolute, holds "..", or passes through a link is refused. */
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "ir/ir.h"
#include "onnx/onnx.h"

static char dir[64];

static void remove_dir(void)
{
    const char *names[] = {"ext.bin", "fifo", "link", "d"};
    char p[128];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* The model's folder (made once, removed at exit). */
static const char *model_dir(void)
{
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "/tmp/carve-fuzz-onnx.XXXXXX");
    char p[128];
    const float w[2] = {0.5f, -2.0f};
    if (!mkdtemp(dir)) abort();
    atexit(remove_dir);
    snprintf(p, sizeof p, "%s/ext.bin", dir);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(w, sizeof w, 1, f) != 1 || fclose(f) != 0) abort();
    snprintf(p, sizeof p, "%s/fifo", dir);
    if (mkfifo(p, 0600) != 0) abort();
    snprintf(p, sizeof p, "%s/link", dir);
    if (symlink("/etc/passwd", p) != 0) abort();
    snprintf(p, sizeof p, "%s/d", dir);
    if (symlink("/etc", p) != 0) abort();
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char err[1024];
    onnx_options o = {.weights = 1, .max_const = 1 << 16};
    onnx_info info;
    ir_graph *g = onnx_import_bytes(data, size, "fuzz.onnx", model_dir(), &o, &info, err, sizeof err);
    if (!g && strstr(err, "no scalar float output")) {
        o.outputs = 1;
        o.opset_lo = 1;
        g = onnx_import_bytes(data, size, "fuzz.onnx", model_dir(), &o, &info, err, sizeof err);
    }
    if (!g) {
        fuzz_check_message(err);
        return 0;
    }
    fuzz_graph_checks(g);
    int regions;
    ir_graph *h = ir_unmerge(g, &regions, err, sizeof err); /* as session/load.c does to every import */
    if (!h) fuzz_check_message(err);
    else {
        fuzz_graph_checks(h);
        ir_free(h);
    }
    ir_free(g);
    return 0;
}
