/* fuzz.h - what every libFuzzer target in fuzz/ shares.
 *
 * Each target is one C file with LLVMFuzzerTestOneInput feeding the bytes to
 * one of carve's readers (graph, ONNX, plan, profile, schedule, --mesh, --model).
 * A target fails only through a sanitizer report (crash, leak, undefined
 * behaviour) or fuzz_assert (a broken round trip): a refused input is fine,
 * as long as it comes with a message.  Messages may echo input bytes (even a
 * newline); the command prints them through cli_error, which writes every
 * byte that is not printable ASCII as \xNN, so each stays one line. */
#ifndef CARVE_FUZZ_H
#define CARVE_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated malloc'd copy of the input (the caller frees). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#define fuzz_assert(c)                                                                   \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz: %s:%d: assertion failed: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A refusal must say something. */
static inline void fuzz_check_message(const char *err) { fuzz_assert(err[0] != 0); }

/* What a graph a reader made must satisfy (the graph and ONNX readers):
 * it verifies, saves as a carve-graph/1 file and loads back to the same
 * text, and a forward graph with a loss (and under 2000 ops) gets its
 * training step derived, or a message. */
static inline void fuzz_graph_checks(const ir_graph *g)
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
    int has_updates = 0;
    for (int i = 0; i < g->n_outputs; i++) has_updates |= g->outputs[i].updates >= 0;
    if (g->loss >= 0 && !has_updates && g->n_ops < 2000) {
        ir_graph *step = ir_train_step(g, NULL, err, sizeof err);
        if (step) fuzz_assert(ir_verify(step, err, sizeof err) == 0);
        else fuzz_check_message(err);
        ir_free(step);
    }
}

#endif
