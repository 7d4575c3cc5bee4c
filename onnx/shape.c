/* shape.c - what the shape ops of ONNX mean: the result shape of Reshape,
 * Flatten, Squeeze, Unsqueeze; the ranges of Slice; the pieces of Split;
 * Transpose's permutation; Pad's widths; the axes of a reduction.  The
 * folder (constants) and the emitters (carve ops) both read nodes through
 * these, so the two agree on every attribute and input.
 */
#include "onnx/context.h"

#include <string.h>

/* Integers of input k of node n (a constant vector); *count = -1 when the
 * input is absent. */
static int input_ints(ox_ctx *c, const Onnx__NodeProto *n, int k, const char *what, int64_t *out, int max, int *count)
{
    *count = -1;
    if (k >= ox_n_in(n) || !n->input[k][0]) return 0;
    ox_val *v = ox_in(c, n, k);
    return v ? ox_const_ints(c, v, what, out, max, count) : -1;
}

int ox_flatten_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out)
{
    int64_t total = 1;
    for (int i = 0; i < rank; i++) total *= dims[i];
    int64_t axis = ox_attr_int(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return ox_fail(c, "axis %lld is outside [%d, %d]", (long long)ox_attr_int(n, "axis", 1), -rank, rank);
    int64_t a = 1;
    for (int i = 0; i < axis; i++) a *= dims[i];
    *out_rank = 2;
    out[0] = a;
    out[1] = a ? total / a : 0;
    return 0;
}

int ox_squeeze_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out)
{
    int64_t v[OX_MAX_RANK + 1];
    int k;
    if (input_ints(c, n, 1, "axes", v, OX_MAX_RANK, &k) < 0) return -1;
    unsigned drop = 0;
    for (int i = 0; i < k; i++) {
        int64_t a;
        if (ox_axis(c, v[i], rank, &a) < 0) return -1;
        if (dims[a] != 1) return ox_fail(c, "axis %lld has size %lld, not 1", (long long)v[i], (long long)dims[a]);
        drop |= 1u << a;
    }
    *out_rank = 0;
    for (int i = 0; i < rank; i++)
        if (k < 0 ? dims[i] != 1 : !(drop >> i & 1)) out[(*out_rank)++] = dims[i];
    return 0;
}

int ox_unsqueeze_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out)
{
    int64_t v[OX_MAX_RANK + 1];
    int k;
    if (input_ints(c, n, 1, "axes", v, OX_MAX_RANK, &k) < 0) return -1;
    if (k < 0) return ox_fail(c, "no axes");
    int r = rank + k;
    if (r > OX_MAX_RANK) return ox_fail(c, "rank %d (at most %d)", r, OX_MAX_RANK);
    unsigned add = 0;
    for (int i = 0; i < k; i++) {
        int64_t a;
        if (ox_axis(c, v[i], r, &a) < 0) return -1;
        if (add >> a & 1) return ox_fail(c, "axis %lld given twice", (long long)v[i]);
        add |= 1u << a;
    }
    for (int i = 0, j = 0; i < r; i++) out[i] = add >> i & 1 ? 1 : dims[j++];
    *out_rank = r;
    return 0;
}

/* Reshape: 0 copies the input's dim (unless allowzero), -1 is inferred */
int ox_reshape_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out)
{
    int64_t total = 1;
    for (int i = 0; i < rank; i++) total *= dims[i];
    int64_t v[OX_MAX_RANK + 1];
    int k;
    if (input_ints(c, n, 1, "shape", v, OX_MAX_RANK + 1, &k) < 0) return -1;
    if (k < 0 || k > OX_MAX_RANK) return ox_fail(c, "target shape of rank %d", k);
    int allowzero = (int)ox_attr_int(n, "allowzero", 0), infer = -1;
    int64_t known = 1;
    for (int i = 0; i < k; i++) {
        int64_t d = v[i];
        if (d == 0 && !allowzero) {
            if (i >= rank) return ox_fail(c, "shape[%d] is 0 (copy) but the input has rank %d", i, rank);
            d = dims[i];
        }
        if (d == -1) {
            if (infer >= 0) return ox_fail(c, "two -1 in the target shape");
            infer = i;
            out[i] = -1;
            continue;
        }
        if (d < 0) return ox_fail(c, "shape[%d] is %lld", i, (long long)d);
        out[i] = d;
        if (ir_mul_i64(known, d, &known) < 0) return ox_fail(c, "the target shape overflows");
    }
    if (infer >= 0) {
        if (!known || total % known) return ox_fail(c, "%lld elements do not reshape to the target with -1", (long long)total);
        out[infer] = total / known;
        known = total;
    }
    if (known != total) return ox_fail(c, "%lld elements do not reshape to %lld", (long long)total, (long long)known);
    *out_rank = k;
    return 0;
}

static int64_t clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

int ox_slice_params(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int64_t *start, int64_t *end,
                    int64_t *step)
{
    int64_t s[OX_MAX_RANK], e[OX_MAX_RANK], ax[OX_MAX_RANK], st[OX_MAX_RANK];
    int ns, ne, na, nst;
    if (input_ints(c, n, 1, "starts", s, OX_MAX_RANK, &ns) < 0 || input_ints(c, n, 2, "ends", e, OX_MAX_RANK, &ne) < 0 ||
        input_ints(c, n, 3, "axes", ax, OX_MAX_RANK, &na) < 0 || input_ints(c, n, 4, "steps", st, OX_MAX_RANK, &nst) < 0)
        return -1;
    if (ns < 0 || ns != ne) return ox_fail(c, "starts and ends differ in length");
    if ((na >= 0 && na != ns) || (nst >= 0 && nst != ns)) return ox_fail(c, "axes or steps differ in length from starts");
    for (int d = 0; d < rank; d++) start[d] = 0, end[d] = dims[d], step[d] = 1;
    unsigned seen = 0;
    for (int i = 0; i < ns; i++) {
        int64_t a = na >= 0 ? ax[i] : i, k = nst >= 0 ? st[i] : 1;
        if (ox_axis(c, a, rank, &a) < 0) return -1;
        if (seen >> a & 1) return ox_fail(c, "axis %lld is sliced twice", (long long)a);
        seen |= 1u << a;
        if (k == 0) return ox_fail(c, "a step of 0");
        int64_t d = dims[a], b = s[i], f = e[i];
        if (b < 0) b += d;
        if (f < 0) f += d;
        if (k > 0) {
            b = clamp(b, 0, d);
            f = clamp(f, 0, d);
        } else {
            b = clamp(b, -1, d - 1);
            f = clamp(f, -1, d - 1);
        }
        /* a step of the dim or more takes the start alone, as a step of the
         * dim does: kept to that, so that no product of a step overflows */
        int64_t most = d > 1 ? d : 1;
        start[a] = b;
        end[a] = f;
        step[a] = clamp(k, -most, most);
    }
    return 0;
}

int ox_split_sizes(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int64_t *axis, int64_t *sizes, int n_out)
{
    if (ox_axis(c, ox_attr_int(n, "axis", 0), rank, axis) < 0) return -1;
    int64_t d = dims[*axis], v[64];
    int k;
    if (input_ints(c, n, 1, "split", v, 64, &k) < 0) return -1;
    if (k >= 0) {
        if (k != n_out) return ox_fail(c, "%d split sizes for %d outputs", k, n_out);
        int64_t sum = 0;
        for (int i = 0; i < k; i++) {
            if (v[i] < 0) return ox_fail(c, "split size %lld", (long long)v[i]);
            sizes[i] = v[i];
            sum += v[i];
        }
        if (sum != d) return ox_fail(c, "split sizes add up to %lld, the axis has %lld", (long long)sum, (long long)d);
        return 0;
    }
    int64_t parts = ox_attr_int(n, "num_outputs", 0);
    if (parts) { /* opset 18: chunks of ceil(d / parts), the last smaller (torch.chunk) */
        if (parts != n_out) return ox_fail(c, "num_outputs %lld for %d outputs", (long long)parts, n_out);
        int64_t chunk = (d + parts - 1) / parts;
        for (int i = 0; i < n_out; i++) sizes[i] = d - chunk * i < chunk ? d - chunk * i : chunk;
        if (sizes[n_out - 1] <= 0) return ox_fail(c, "axis of %lld does not split into %d parts", (long long)d, n_out);
        return 0;
    }
    if (d % n_out) return ox_fail(c, "axis of %lld does not split into %d equal parts", (long long)d, n_out);
    for (int i = 0; i < n_out; i++) sizes[i] = d / n_out;
    return 0;
}

int ox_perm(ox_ctx *c, const Onnx__NodeProto *n, int rank, int64_t *perm)
{
    int64_t p[OX_MAX_RANK + 1];
    int k = ox_attr_ints(n, "perm", p, OX_MAX_RANK + 1);
    if (k < 0) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return 0;
    }
    if (k != rank) return ox_fail(c, "perm has %d entries for rank %d", k, rank);
    unsigned seen = 0;
    for (int i = 0; i < rank; i++) {
        if (p[i] < 0 || p[i] >= rank || (seen >> p[i] & 1)) return ox_fail(c, "perm is not a permutation of 0..%d", rank - 1);
        seen |= 1u << p[i];
        perm[i] = p[i];
    }
    return 0;
}

int ox_pad_params(ox_ctx *c, const Onnx__NodeProto *n, int rank, int64_t *before, int64_t *after, double *value)
{
    char mode[32];
    ox_attr_str(n, "mode", mode, sizeof mode);
    if (mode[0] && strcmp(mode, "constant")) return ox_fail(c, "mode '%s' (carve pads with a constant only)", mode);
    int64_t p[2 * OX_MAX_RANK], axes[OX_MAX_RANK];
    int k, na;
    if (input_ints(c, n, 1, "pads", p, 2 * OX_MAX_RANK, &k) < 0 || input_ints(c, n, 3, "axes", axes, OX_MAX_RANK, &na) < 0) return -1;
    if (na < 0) { /* every axis */
        if (k != 2 * rank) return ox_fail(c, "%d pads for rank %d", k, rank);
        na = rank;
        for (int i = 0; i < rank; i++) axes[i] = i;
    }
    if (k != 2 * na) return ox_fail(c, "%d pads for %d axes", k, na);
    for (int i = 0; i < rank; i++) before[i] = after[i] = 0;
    for (int i = 0; i < k; i++) /* (a pad's size is negated and added to a dim's: bounded first) */
        if (p[i] <= -((int64_t)1 << 40) || p[i] >= ((int64_t)1 << 40))
            return ox_fail(c, "pad %lld: at most 2^40 elements either way", (long long)p[i]);
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (ox_axis(c, axes[i], rank, &a) < 0) return -1;
        before[a] = p[i];
        after[a] = p[i + na];
    }
    *value = 0;
    if (ox_n_in(n) > 2 && n->input[2][0]) {
        ox_val *v = ox_in(c, n, 2);
        ox_tensor *t = v ? ox_const(c, v) : NULL;
        if (!t) return -1;
        if (t->n != 1) return ox_fail(c, "constant_value must be a scalar");
        *value = t->v[0];
    }
    return 0;
}

int ox_reduce_axes(ox_ctx *c, const Onnx__NodeProto *n, int rank, int axes_input, unsigned *mask, int *none)
{
    int64_t a[OX_MAX_RANK + 1];
    int k;
    *none = 0;
    *mask = 0;
    if (axes_input) {
        if (input_ints(c, n, 1, "axes", a, OX_MAX_RANK + 1, &k) < 0) return -1;
        if ((k <= 0) && ox_attr_int(n, "noop_with_empty_axes", 0)) {
            *none = 1;
            return 0;
        }
    } else {
        k = ox_attr_ints(n, "axes", a, OX_MAX_RANK + 1);
    }
    if (k > OX_MAX_RANK) return ox_fail(c, "too many axes");
    if (k <= 0) {
        *mask = rank ? (1u << rank) - 1 : 0;
        return 0;
    }
    for (int i = 0; i < k; i++) {
        int64_t x;
        if (ox_axis(c, a[i], rank, &x) < 0) return -1;
        *mask |= 1u << x;
    }
    return 0;
}
