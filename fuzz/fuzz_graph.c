/* fuzz_graph.c - the carve-graph/1 reader (ir_load_json): a graph that loads
 * must verify, save and load back to the same text, and (with a loss) get its
 * training step derived. */
#include "fuzz/fuzz.h"
#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char *text = fuzz_text(data, size), err[IR_ERR_LEN];
    ir_graph *g = ir_load_json(text, err, sizeof err);
    if (!g) {
        fuzz_check_message(err);
    } else {
        fuzz_graph_checks(g);
        ir_free(g);
    }
    free(text);
    return 0;
}
