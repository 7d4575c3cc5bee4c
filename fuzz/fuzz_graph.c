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
        int has_updates = 0;
        for (int i = 0; i < g->n_outputs; i++) has_updates |= g->outputs[i].updates >= 0;
        if (g->loss >= 0 && !has_updates && g->n_ops < 2000) {
            ir_graph *step = ir_train_step(g, NULL, err, sizeof err);
            if (step) fuzz_assert(ir_verify(step, err, sizeof err) == 0);
            else fuzz_check_message(err);
            ir_free(step);
        }
        ir_free(g);
    }
    free(text);
    return 0;
}
