/* einsum.c - parsing einsum subscripts ("bsh,hf->bsf").
 *
 * carve's einsum takes two operands.  Every letter names one dimension and
 * appears in exactly two or three of {a, b, out}, at most once in each.  So a
 * letter is a batch dim (a, b, out), a row dim (a, out), a column dim (b, out)
 * or a contracted dim (a, b), and the VJP of an einsum is again such an einsum.
 */
#include "ir.h"

#include <string.h>

int ir_einsum_pos(const char *list, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (list[i] == c) return i;
    return -1;
}

static int parse_list(const char **p, char stop, char *out, int *rank, char *err, size_t n)
{
    *rank = 0;
    for (; **p && **p != stop && !(stop == '-' && **p == ','); (*p)++) {
        char c = **p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return ir_errf(err, n, "subscripts may only hold letters, one ',' and one '->'");
        if (*rank == IR_MAX_RANK) return ir_errf(err, n, "more than 6 letters in one operand");
        if (ir_einsum_pos(out, *rank, c) >= 0) return ir_errf(err, n, "a letter repeats within one operand");
        out[(*rank)++] = c;
    }
    return 0;
}

int ir_einsum_parse(const char *s, int rank_a, int rank_b, ir_einsum_spec *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (!s || !*s) return ir_errf(err, errlen, "empty subscripts");
    const char *p = s;
    if (parse_list(&p, '-', e->a, &e->rank_a, err, errlen) < 0) return -1;
    if (*p != ',') return ir_errf(err, errlen, "expected 'a,b->out' (missing ',')");
    p++;
    if (parse_list(&p, '-', e->b, &e->rank_b, err, errlen) < 0) return -1;
    if (p[0] != '-' || p[1] != '>') return ir_errf(err, errlen, "expected 'a,b->out' (missing '->')");
    p += 2;
    if (parse_list(&p, '\0', e->out, &e->rank_out, err, errlen) < 0) return -1;
    if (rank_a >= 0 && rank_a != e->rank_a) {
        if (err) snprintf(err, errlen, "first operand has rank %d but subscripts give %d letters", rank_a, e->rank_a);
        return -1;
    }
    if (rank_b >= 0 && rank_b != e->rank_b) {
        if (err) snprintf(err, errlen, "second operand has rank %d but subscripts give %d letters", rank_b, e->rank_b);
        return -1;
    }
    const char *lists[3] = {e->a, e->b, e->out};
    int ranks[3] = {e->rank_a, e->rank_b, e->rank_out};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < ranks[l]; i++) {
            char c = lists[l][i];
            int count = 0;
            for (int m = 0; m < 3; m++) count += ir_einsum_pos(lists[m], ranks[m], c) >= 0;
            if (count < 2) {
                if (err) snprintf(err, errlen, "letter '%c' appears only once (each letter must be in two of a, b, out)", c);
                return -1;
            }
        }
    return 0;
}
