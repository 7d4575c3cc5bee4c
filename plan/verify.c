/* verify.c - rebuilding a loaded plan and checking it against its file.
 *
 * A plan is a contract: the file's derived fields (argument and activation
 * shardings, local shapes and bytes, the device list, collectives, predicted
 * cost) must be exactly what carve derives from the file's inputs (model,
 * mesh, decisions, hardware, cost options).  plan_verify rebuilds the whole
 * document with plan_to_json and walks it beside the file; the first field
 * that differs, is missing or is extra is named with its path
 * ("arguments[3] (h0.attn.wq).partition_spec").
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/schedule.h"
#include "plan/plan.h"

int plan_replay(plan *pl, const char *path, shard_state *st, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    char e2[256], pp[512], pn[256];
    plan_printable(path, pp, sizeof pp);
    schedule sc; /* gather:POLICY and overlap:AXIS are the lowering's, not decisions (the plan's step was built from it) */
    if (pl->schedule[0] && sched_parse(pl->schedule, &pl->mesh, &sc, e2, sizeof e2) == 0) {
        if (sched_gather_policy(&sc) >= 0) st->gather_policy = sched_gather_policy(&sc);
        for (int i = 0; i < sc.n; i++)
            if (sc.t[i].kind == TACTIC_OVERLAP) st->overlap_axes |= 1u << sc.t[i].axis;
    }
    for (int i = 0; i < pl->n_decisions; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s", pl->decision_names[i]);
        char *nl = strchr(name, '\n');
        if (!nl) return ir_errf(err, errlen, "%s: decisions[%d]: damaged", pp, i);
        *nl = 0;
        int v = ir_find(g, name), a = shard_mesh_axis(&st->mesh, nl + 1);
        if (v < 0 || (g->values[v].role == IR_INTERMEDIATE && g->values[v].grad_of < 0)) /* zero1: gradients atomic */
            return ir_errf(err, errlen, "%s: decisions[%d].arg: does not match the model: no argument '%s'", pp, i,
                           plan_printable(name, pn, sizeof pn));
        if (a < 0)
            return ir_errf(err, errlen, "%s: decisions[%d].axis: does not match the mesh: no axis '%s'", pp, i,
                           plan_printable(nl + 1, pn, sizeof pn));
        pl->decisions[i].value = v;
        pl->decisions[i].axis = (int8_t)a;
        if (shard_apply(st, &pl->decisions[i], e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "%s: decisions[%d]: does not match the model: %s", pp, i, e2);
    }
    return 0;
}

int plan_hw(const plan *pl, const char *path, cost_hw *hw, char *err, size_t errlen)
{
    char e2[512], pp[512];
    plan_printable(path, pp, sizeof pp);
    if (pl->hw) {
        char *text = cJSON_PrintUnformatted(pl->hw);
        int r = cost_hw_from_json(text, path, hw, e2, sizeof e2);
        cJSON_free(text);
        return r < 0 ? ir_errf(err, errlen, "%s: hardware.profile: %s", pp, e2) : 0;
    }
    if (cost_hw_lookup(pl->hw_name[0] ? pl->hw_name : "a100", hw, e2, sizeof e2) < 0)
        return ir_errf(err, errlen, "%s: hardware.name: %s", pp, e2);
    return 0;
}

/* ---- comparing documents ------------------------------------------------- */

/* Appends ".key" or "[i] (name)" to path. */
static void path_push(char *path, size_t n, const cJSON *parent, const cJSON *item, int index)
{
    size_t k = strlen(path);
    char pk[96];
    if (cJSON_IsArray(parent)) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(item, "name");
        if (cJSON_IsString(nm)) snprintf(path + k, n - k, "[%d] (%s)", index, plan_printable(nm->valuestring, pk, sizeof pk));
        else snprintf(path + k, n - k, "[%d]", index);
    } else {
        snprintf(path + k, n - k, "%s%s", k ? "." : "", plan_printable(item->string, pk, sizeof pk));
    }
}

/* The value as compact JSON, cut to fit a message. */
static void show(const cJSON *x, char *buf, size_t n)
{
    char *t = x ? cJSON_PrintUnformatted(x) : NULL;
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s", t ? t : "nothing");
    if (t && strlen(t) >= sizeof tmp) strcpy(tmp + sizeof tmp - 5, "...");
    cJSON_free(t);
    plan_printable(tmp, buf, n);
}

/* Numbers are equal when they print the same with %.17g, or (non-integers)
 * within 1e-12 relative: the estimator's sums can differ in their last bits
 * between optimisation levels (-O2 and the sanitizer build's -O1). */
static int same_number(double a, double b)
{
    if (a == b) return 1;
    if (a == floor(a) && b == floor(b)) return 0;
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

/* Walks want (the rebuilt document) beside have (the file).  Returns 1 at the
 * first difference with path and why set, else 0. */
static int diff(const cJSON *want, const cJSON *have, char *path, size_t pn, char *why, size_t wn)
{
    char a[200], b[200];
    if (!have) {
        show(want, a, sizeof a);
        snprintf(why, wn, "missing (carve derives %s)", a);
        return 1;
    }
    int same_type = (want->type & 0xff) == (have->type & 0xff) || (cJSON_IsBool(want) && cJSON_IsBool(have));
    if (same_type && cJSON_IsObject(want)) {
        const cJSON *x;
        size_t k = strlen(path);
        cJSON_ArrayForEach(x, want)
        {
            path_push(path, pn, want, x, 0);
            if (diff(x, cJSON_GetObjectItemCaseSensitive(have, x->string), path, pn, why, wn)) return 1;
            path[k] = 0;
        }
        cJSON_ArrayForEach(x, have)
        {
            if (cJSON_GetObjectItemCaseSensitive(want, x->string)) continue;
            path_push(path, pn, have, x, 0);
            snprintf(why, wn, "unknown key");
            return 1;
        }
        return 0;
    }
    if (same_type && cJSON_IsArray(want)) {
        int nw = cJSON_GetArraySize(want), nh = cJSON_GetArraySize(have);
        size_t k = strlen(path);
        const cJSON *x = want->child, *y = have->child; /* in step: indexing each would be quadratic */
        for (int i = 0; x && y; i++, x = x->next, y = y->next) {
            path_push(path, pn, want, x, i);
            if (diff(x, y, path, pn, why, wn)) return 1;
            path[k] = 0;
        }
        if (nw == nh) return 0;
        snprintf(why, wn, "has %d entries, carve derives %d", nh, nw);
        return 1;
    }
    int equal = same_type && (cJSON_IsNumber(want)   ? same_number(want->valuedouble, have->valuedouble)
                              : cJSON_IsString(want) ? !strcmp(want->valuestring, have->valuestring)
                              : cJSON_IsBool(want)   ? cJSON_IsTrue(want) == cJSON_IsTrue(have)
                                                     : 1);
    if (equal) return 0;
    show(have, a, sizeof a);
    show(want, b, sizeof b);
    snprintf(why, wn,
             "the file has %s, but carve derives %s from the plan's model, mesh and decisions (an edited plan, or one "
             "written from another model file or another version of carve: run autopart again)",
             a, b);
    return 1;
}

/* The first difference in sections `secs` of want and the file: 1 with key and
 * why set, else 0. */
static int first_diff(const cJSON *want, const cJSON *file, const char *const *secs, char *key, size_t kn, char *why,
                      size_t wn)
{
    for (const char *const *s = secs; *s; s++) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(want, *s), *h = cJSON_GetObjectItemCaseSensitive(file, *s);
        if (!w) continue;
        snprintf(key, kn, "%s", *s);
        if (diff(w, h, key, kn, why, wn)) return 1;
    }
    return 0;
}

int plan_verify(plan *pl, const char *path, const shard_state *st, const spmd_program *p, const cost_estimate *e,
                char *err, size_t errlen)
{
    static const char *const layout[] = {"mesh", "devices", "arguments", "activations", NULL};
    static const char *const price[] = {"collectives", "predicted", NULL};
    cJSON *built = plan_to_json(pl, st, p, pl->has_predicted ? e : NULL, pl->version);
    char *text = cJSON_PrintUnformatted(built); /* raw numbers become numbers */
    cJSON_Delete(built);
    cJSON *want = text ? cJSON_Parse(text) : NULL;
    cJSON_free(text);
    if (!want) ir_oom(0);
    char key[512], why[768], pp[512];
    plan_printable(path, pp, sizeof pp);
    int rc = 0;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(want, "model"), "params");
    const cJSON *fparams = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pl->doc, "model"), "params");
    if (fparams && !(cJSON_IsNumber(fparams) && cJSON_IsNumber(params) && fparams->valuedouble == params->valuedouble)) {
        char a[200], b[200];
        show(fparams, a, sizeof a);
        show(params, b, sizeof b);
        snprintf(key, sizeof key, "model.params");
        snprintf(why, sizeof why, "does not match the model: the file has %s params, the rebuilt model %s", a, b);
        rc = -1;
    }
    if (rc || first_diff(want, pl->doc, layout, key, sizeof key, why, sizeof why)) {
        ir_errf(err, errlen, "%s: %s: %s", pp, key, why);
        rc = -1;
    } else if (first_diff(want, pl->doc, price, key, sizeof key, why, sizeof why)) {
        char *w = strstr(why, " from the plan's");
        if (w) snprintf(w, sizeof why - (size_t)(w - why), " now (made by another version of carve, or edited; the figures "
                                                           "shown are carve's own)");
        snprintf(pl->note, sizeof pl->note, "%.400s: %.200s: %.700s", pp, key, why);
    }
    cJSON_Delete(want);
    return rc;
}
