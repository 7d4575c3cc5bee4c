/* test_ir.c - the graph builder, shape inference, verifier, printer, PCG32. */
#include "ir/ir.h"
#include "ir/pcg32.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void test_pcg32(void)
{
    /* Published reference output of the PCG32 demo: seed 42, sequence 54. */
    static const uint32_t want[6] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    pcg32 r;
    pcg32_seed(&r, 42, 54);
    for (int i = 0; i < 6; i++) CHECKF(pcg32_next(&r) == want[i], "output %d", i);
    /* Jumping ahead lands where stepping does. */
    pcg32 a, b;
    pcg32_seed(&a, 7, 3);
    pcg32_seed(&b, 7, 3);
    for (int i = 0; i < 1000; i++) pcg32_next(&a);
    pcg32_advance(&b, 1000);
    CHECK(pcg32_next(&a) == pcg32_next(&b));
    int hist[7] = {0};
    for (int i = 0; i < 7000; i++) hist[pcg32_below(&r, 7)]++;
    for (int i = 0; i < 7; i++) CHECKF(hist[i] > 850 && hist[i] < 1150, "bucket %d has %d", i, hist[i]);
}

static void test_builder(void)
{
    ir_graph *g = ir_new("t");
    int64_t xd[3] = {2, 3, 4}, wd[2] = {4, 5};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 3, xd);
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, wd);
    int y = ir_einsum(g, "bsh,hf->bsf", x, w);
    CHECK(y >= 0);
    CHECK(g->values[y].rank == 3 && g->values[y].dims[2] == 5);
    int64_t r = 2;
    int s = ir_reduce(g, IR_OP_REDUCE_SUM, y, 1, &r);
    CHECK(g->values[s].rank == 2 && g->values[s].dims[1] == 3);
    int64_t all[2] = {0, 1};
    int l = ir_reduce(g, IR_OP_REDUCE_SUM, s, 2, all);
    CHECK(ir_set_loss(g, l) == 0);
    char err[256];
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    CHECK(ir_find(g, "w") == w);
    CHECK(ir_param_count(g) == 20);
    CHECK(ir_op_flops(g, 0) == 2.0 * 2 * 3 * 4 * 5);
    /* The clone prints the same. */
    char *a = NULL, *b = NULL;
    size_t na, nb;
    FILE *fa = open_memstream(&a, &na), *fb = open_memstream(&b, &nb);
    ir_graph *c = ir_clone(g);
    ir_print(g, fa);
    ir_print(c, fb);
    fclose(fa);
    fclose(fb);
    CHECK(strcmp(a, b) == 0);
    CHECK(strstr(a, "einsum \"bsh,hf->bsf\"(x, w) : f32[2,3,5]") != NULL);
    free(a);
    free(b);
    ir_free(c);
    ir_free(g);
}

static void test_errors(void)
{
    int64_t d2[2] = {4, 5}, d3[2] = {5, 4}, neg[1] = {-3};
    struct {
        const char *want;
    } cases[] = {{"shape mismatch"}, {"letter 'q' appears only once"}, {"duplicate name"}, {"must be positive"},
                 {"rank 2 but subscripts give 3"}, {"cannot become"}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        ir_graph *g = ir_new("e");
        int a = ir_arg(g, "a", IR_PARAM, IR_F32, 2, d2);
        int b = ir_arg(g, "b", IR_PARAM, IR_F32, 2, d3);
        int r = 0;
        switch (c) {
        case 0: r = ir_binary(g, IR_OP_ADD, a, b); break;
        case 1: r = ir_einsum(g, "ij,jq->i", a, b); break;
        case 2: r = ir_arg(g, "a", IR_PARAM, IR_F32, 2, d2); break;
        case 3: r = ir_arg(g, "n", IR_PARAM, IR_F32, 1, neg); break;
        case 4: r = ir_einsum(g, "ijk,jk->ik", a, b); break;
        case 5: r = ir_reshape(g, a, 1, neg + 0 == neg ? (int64_t[]){19} : NULL); break;
        }
        CHECK(r == -1);
        CHECKF(ir_error(g) && strstr(ir_error(g), cases[c].want), "case %d: got '%s'", c, ir_error(g) ? ir_error(g) : "(none)");
        /* Sticky: a later call with -1 keeps the first message. */
        CHECK(ir_unary(g, IR_OP_EXP, r) == -1);
        CHECK(strstr(ir_error(g), cases[c].want) != NULL);
        ir_free(g);
    }
}

static void *nearest_elsewhere(void *arg)
{
    const char *near = ir_nearest("mesj", "help model mesh");
    *(int *)arg = near && !strcmp(near, "mesh");
    return NULL;
}

/* ir_nearest's answer is the calling thread's: another thread's call (a
 * session on another thread) does not change it. */
static void test_nearest(void)
{
    const char *mine = ir_nearest("gptt", "gpt llama t5");
    CHECK(mine && !strcmp(mine, "gpt"));
    CHECK(ir_nearest("zzzzzz", "gpt llama t5") == NULL);
    CHECK(ir_nearest("gptt", "gpt llama t5") == mine); /* the same buffer, rewritten */
    int ok = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, nearest_elsewhere, &ok) == 0 && pthread_join(t, NULL) == 0);
    CHECK(ok);
    CHECKF(mine && !strcmp(mine, "gpt"), "got '%s' after another thread's call", mine ? mine : "(null)");
}

int main(void)
{
    test_pcg32();
    test_builder();
    test_errors();
    test_nearest();
    return test_done();
}
