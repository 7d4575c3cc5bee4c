/* options.c - cost_options <-> the "cost_options" object of a plan file.
 *
 * Everything in cost_options changes the price of a plan, so a plan records
 * every field and explain/run replay them.  The fields are described once, in
 * the table below (JSON key, kind, offset): a new pricing option is one more
 * row here and one more line in docs/plan-format.md and docs/plan.schema.json;
 * writing, reading, unknown-key refusal and the error messages follow.
 */
#include <stddef.h>
#include <string.h>

#include "plan/plan.h"

typedef enum { OPT_PRECISION, OPT_GRADS, OPT_BOOL, OPT_BYTES } opt_kind;

typedef struct opt_field {
    const char *key;
    opt_kind kind;
    size_t offset;
} opt_field;

static const opt_field fields[] = {
    {"precision", OPT_PRECISION, offsetof(cost_options, precision)},
    {"overlap", OPT_BOOL, offsetof(cost_options, overlap)},
    {"memory_capacity_bytes", OPT_BYTES, offsetof(cost_options, memory_capacity)},
    {"grads", OPT_GRADS, offsetof(cost_options, grads)},
};
static const int n_fields = sizeof fields / sizeof fields[0];

cJSON *plan_options_to_json(const cost_options *o)
{
    cJSON *j = cJSON_CreateObject();
    const char *base = (const char *)o;
    for (int i = 0; i < n_fields; i++) {
        const opt_field *f = &fields[i];
        if (f->kind == OPT_PRECISION) {
            cost_precision v;
            memcpy(&v, base + f->offset, sizeof v);
            cJSON_AddStringToObject(j, f->key, cost_precision_name(v));
        } else if (f->kind == OPT_GRADS) {
            cost_grads v;
            memcpy(&v, base + f->offset, sizeof v);
            cJSON_AddStringToObject(j, f->key, cost_grads_name(v));
        } else if (f->kind == OPT_BOOL) {
            int v;
            memcpy(&v, base + f->offset, sizeof v);
            cJSON_AddBoolToObject(j, f->key, v != 0);
        } else {
            double v;
            memcpy(&v, base + f->offset, sizeof v);
            char buf[40];
            snprintf(buf, sizeof buf, "%.17g", v);
            cJSON_AddItemToObject(j, f->key, cJSON_CreateRaw(buf));
        }
    }
    return j;
}

static int read_field(const opt_field *f, const cJSON *x, char *base, char *err, size_t errlen)
{
    if (f->kind == OPT_PRECISION) {
        cost_precision v;
        char e2[200];
        if (!cJSON_IsString(x) || cost_precision_parse(x->valuestring, &v, e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "%s: must be a precision name (f32, tf32, bf16, fp16)", f->key);
        memcpy(base + f->offset, &v, sizeof v);
        return 0;
    }
    if (f->kind == OPT_GRADS) {
        cost_grads v;
        char e2[200];
        if (!cJSON_IsString(x) || cost_grads_parse(x->valuestring, &v, e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "%s: must be auto, f32 or working", f->key);
        memcpy(base + f->offset, &v, sizeof v);
        return 0;
    }
    if (f->kind == OPT_BOOL) {
        if (!cJSON_IsBool(x)) return ir_errf(err, errlen, "%s: must be true or false", f->key);
        int v = cJSON_IsTrue(x);
        memcpy(base + f->offset, &v, sizeof v);
        return 0;
    }
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > 1e18)
        return ir_errf(err, errlen, "%s: must be a number of bytes (0: the profile's)", f->key);
    memcpy(base + f->offset, &x->valuedouble, sizeof x->valuedouble);
    return 0;
}

int plan_options_from_json(const cJSON *j, cost_options *o, char *err, size_t errlen)
{
    char pk[96];
    if (!cJSON_IsObject(j)) return ir_errf(err, errlen, "must be an object");
    const cJSON *x;
    cJSON_ArrayForEach(x, j)
    {
        int i = 0;
        while (i < n_fields && strcmp(fields[i].key, x->string)) i++;
        if (i == n_fields) return ir_errf(err, errlen, "%s: unknown option", plan_printable(x->string, pk, sizeof pk));
        if (read_field(&fields[i], x, (char *)o, err, errlen) < 0) return -1;
    }
    return 0;
}
