/* fuzz_onnx.c - the ONNX reader (onnx_import_bytes): the bytes as a
 * ModelProto, imported with its weights.  A model that imports must verify,
 * save as a carve-graph/1 file and load back to the same text, and (with a
 * loss) get its training step derived; a model without a scalar output is
 * imported again with its outputs kept (as the node tests are).  Folded
 * constants are capped at 2^16 elements here, so a shape of 10^12 elements
 * is a refusal, not a long allocation. */
#include "fuzz/fuzz.h"
#include "ir/ir.h"
#include "onnx/onnx.h"

static void check(ir_graph *g)
{
    char err[IR_ERR_LEN];
    fuzz_assert(ir_verify(g, err, sizeof err) == 0);
    char *s = ir_save_json(g);
    fuzz_assert(s);
    ir_graph *back = ir_load_json(s, err, sizeof err);
    fuzz_assert(back);
    char *s2 = ir_save_json(back);
    fuzz_assert(s2 && !strcmp(s, s2));
    free(s);
    free(s2);
    ir_free(back);
    if (g->loss >= 0 && g->n_ops < 2000) {
        ir_graph *step = ir_train_step(g, NULL, err, sizeof err);
        if (step) fuzz_assert(ir_verify(step, err, sizeof err) == 0);
        else fuzz_check_message(err);
        ir_free(step);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char err[1024];
    onnx_options o = {.weights = 1, .max_const = 1 << 16};
    onnx_info info;
    ir_graph *g = onnx_import_bytes(data, size, "fuzz.onnx", NULL, &o, &info, err, sizeof err);
    if (!g && strstr(err, "no scalar float output")) {
        o.outputs = 1;
        o.opset_lo = 1;
        g = onnx_import_bytes(data, size, "fuzz.onnx", NULL, &o, &info, err, sizeof err);
    }
    if (!g) fuzz_check_message(err);
    else {
        check(g);
        ir_free(g);
    }
    return 0;
}
