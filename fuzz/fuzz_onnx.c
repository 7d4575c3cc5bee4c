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
        fuzz_graph_checks(g);
        ir_free(g);
    }
    return 0;
}
