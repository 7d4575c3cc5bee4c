/* models.c - model specs, presets, the registry's dispatch and the checks.
 *
 * A model_config is a model family ("mlp", "gpt", "gns", "unet", "llama",
 * "moe", "vit" or "t5") and its integer keys in a canonical order, with every
 * key filled in, readable by index (values[]) or typed (cfg->gpt.hidden).
 * The registry, models/models.def, owns all of it: each family's keys,
 * defaults and per-key upper limits, its builder, size formulas and checks,
 * and the presets (named configurations of a family).  This file makes the
 * tables from it and dispatches through them.  A spec "NAME:key=value,..."
 * starts from NAME's values and overrides keys; the result is checked as a
 * whole (positive values, limits, the family's rules such as heads dividing
 * hidden, no tensor above the IR's 2^48-element limit) so that a config that
 * parses always builds.
 */
#include "models/registry.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Largest tensor a config may create, in elements (the IR's own limit). */
#define MODEL_MAX_NUMEL ((double)((int64_t)1 << 48))

/* ---- the registry (models.def) ------------------------------------------ */

#define MODEL_KEY_NAME(key, def, limit) #key,
#define MODEL_KEY_DEFAULT(key, def, limit) (int64_t)(def),
#define MODEL_KEY_LIMIT(key, def, limit) (int64_t)(limit),
#define MODEL_KEY_COUNT(key, def, limit) +1
#define BATCH_KEY_none(id) (-1)
#define BATCH_KEY_batch(id) ((int)(offsetof(model_##id##_config, batch) / sizeof(int64_t)))

/* Per family: its key names, defaults and limits, and its functions on the
 * untyped config (what the table below holds). */
#define MODEL(E, id, keys, batch, dropout, attn, about)                                                                    \
    static const char *const keys_##id[] = {keys(MODEL_KEY_NAME)};                                                     \
    static const int64_t defaults_##id[] = {keys(MODEL_KEY_DEFAULT)};                                                  \
    static const int64_t limits_##id[] = {keys(MODEL_KEY_LIMIT)};                                                      \
    static int64_t params_##id(const model_config *c) { return model_##id##_params(&c->id); }                          \
    static double flops_##id(const model_config *c) { return model_##id##_flops(&c->id); }                             \
    static int check_##id(const model_config *c, const char *spec, model_big *big, char *err, size_t errlen)           \
    {                                                                                                                  \
        return model_##id##_check(&c->id, spec, big, err, errlen);                                                     \
    }                                                                                                                  \
    _Static_assert(sizeof(model_##id##_config) <= MODEL_MAX_KEYS * sizeof(int64_t), #id ": more keys than MODEL_MAX_KEYS");
#include "models/models.def"
#undef MODEL

typedef struct model_def {
    const char *name;
    int n_keys;
    const char *const *keys;
    const int64_t *defaults, *limits; /* limits: the largest value accepted for each key */
    int batch;                        /* index of the batch key, or -1 */
    int dropout;                      /* the builder places dropout: the spec takes dropout=P */
    int attn;                         /* the builder's attention may be fused: the spec takes attention=... */
    const char *about;
    ir_graph *(*build)(const model_config *, char *, size_t);
    int64_t (*params)(const model_config *);
    double (*flops)(const model_config *);
    int (*check)(const model_config *, const char *, model_big *, char *, size_t);
} model_def;

/* By model_family; row 0 (MODEL_NONE) is empty. */
static const model_def models[] = {
    [MODEL_NONE] = {NULL, 0, NULL, NULL, NULL, -1, 0, 0, NULL, NULL, NULL, NULL, NULL},
#define MODEL(E, id, keys, batch, dropout, attn, about)                                                                    \
    [MODEL_##E] = {#id,           0 keys(MODEL_KEY_COUNT), keys_##id, defaults_##id, limits_##id, BATCH_KEY_##batch(id), \
                   dropout,       attn,                    about, model_build_##id, params_##id, flops_##id, check_##id},
#include "models/models.def"
#undef MODEL
};
#define N_MODELS ((int)(sizeof models / sizeof models[0])) /* MODEL_NONE included */

typedef struct preset_def {
    const char *name;
    model_family family;
    int64_t values[MODEL_MAX_KEYS]; /* in the family's key order */
    const char *about;
} preset_def;

#define PRESET_VALUES(...) {__VA_ARGS__}
#define MODEL(...)
#define PRESET(name, E, values, about) {name, MODEL_##E, PRESET_VALUES values, about},
static const preset_def presets[] = {
#include "models/models.def"
};
#undef PRESET
#undef MODEL
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

/* Families and presets, each family followed by its presets. */
static const char *const all_names[] = {
#define MODEL(E, id, ...) #id,
#define PRESET(name, ...) name,
#include "models/models.def"
#undef PRESET
#undef MODEL
    NULL,
};

const char *const *model_names(void) { return all_names; }

static const model_def *find_model(const char *name)
{
    for (int i = 1; i < N_MODELS; i++)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

static const preset_def *find_preset(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

/* The row of a parsed config, or NULL. */
static const model_def *family_of(const model_config *cfg)
{
    return cfg->family > MODEL_NONE && (int)cfg->family < N_MODELS ? &models[cfg->family] : NULL;
}

static void join_names(char *buf, size_t n, const char *const *names, int count, const char *sep)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; (count < 0 ? names[i] != NULL : i < count) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? sep : "", names[i]);
}

int64_t model_get(const model_config *cfg, const char *key)
{
    for (int i = 0; i < cfg->n_keys; i++)
        if (strcmp(cfg->keys[i], key) == 0) return cfg->values[i];
    return -1;
}

static int default_attention(const model_config *cfg);

char *model_config_str(const model_config *cfg, char *buf, size_t n)
{
    if (!n) return buf;
    size_t k = (size_t)snprintf(buf, n, "%s", cfg->model);
    for (int i = 0; i < cfg->n_keys && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%c%s=%lld", i ? ',' : ':', cfg->keys[i], (long long)cfg->values[i]);
    if (cfg->dropout > 0 && k < n) { /* the shortest text that reads back the same */
        char num[32];
        snprintf(num, sizeof num, "%.15g", cfg->dropout);
        if (strtod(num, NULL) != cfg->dropout) snprintf(num, sizeof num, "%.17g", cfg->dropout);
        k += (size_t)snprintf(buf + k, n - k, ",dropout=%s", num);
    }
    const model_def *m = family_of(cfg);
    if (m && m->attn && cfg->attention && cfg->attention != default_attention(cfg) && k < n)
        snprintf(buf + k, n - k, ",attention=%s", model_attention_fused(cfg) ? "fused" : "materialized");
    return buf;
}

/* The form a config that names none gets: materialised with dropout (the
 * fused op draws no dropout on the probabilities), else the default. */
static int default_attention(const model_config *cfg)
{
    return cfg->dropout > 0 ? MODEL_ATTENTION_MATERIALIZED : MODEL_ATTENTION_DEFAULT;
}

int model_attention_fused(const model_config *cfg)
{
    const model_def *m = family_of(cfg);
    int form = cfg->attention ? cfg->attention : default_attention(cfg);
    return m && m->attn && form == MODEL_ATTENTION_FUSED;
}

int model_takes_attention(const model_config *cfg)
{
    const model_def *m = family_of(cfg);
    return m && m->attn;
}

char *model_config_str_form(const model_config *cfg, char *buf, size_t n)
{
    model_config_str(cfg, buf, n);
    size_t k = strlen(buf);
    if (model_takes_attention(cfg) && !strstr(buf, ",attention=") && k + 1 < n)
        snprintf(buf + k, n - k, ",attention=%s", model_attention_fused(cfg) ? "fused" : "materialized");
    return buf;
}

/* "attention=fused|materialized" in [p, end).  Returns 0, 1 when the key is
 * not attention, or -1 with a message. */
static int parse_attention(const char *spec, const model_def *m, const char *p, const char *eq, const char *end,
                           model_config *cfg, int *seen, char *err, size_t errlen)
{
    if (eq - p != 9 || strncmp(p, "attention", 9) || !m->attn) return 1;
    if (*seen) return ir_errf(err, errlen, "model '%s': key 'attention' given twice", spec);
    *seen = 1;
    size_t len = (size_t)(end - eq - 1);
    if (len == 5 && !strncmp(eq + 1, "fused", 5)) cfg->attention = MODEL_ATTENTION_FUSED;
    else if (len == 12 && !strncmp(eq + 1, "materialized", 12)) cfg->attention = MODEL_ATTENTION_MATERIALIZED;
    else
        return ir_errf(err, errlen, "model '%s': bad attention '%.*s' (expected fused or materialized)", spec, (int)len,
                       eq + 1);
    return 0;
}

/* Models whose builders place dropout (models.def's dropout column). */
static int takes_dropout(const model_def *m) { return m->dropout; }

/* "dropout=P" in [p, end): P a decimal rate in [0, 1).  Returns 0, 1 when
 * the key is not dropout, or -1 with a message. */
static int parse_dropout(const char *spec, const model_def *m, const char *p, const char *eq, const char *end,
                         model_config *cfg, int *seen, char *err, size_t errlen)
{
    if (eq - p != 7 || strncmp(p, "dropout", 7) || !takes_dropout(m)) return 1;
    if (*seen) return ir_errf(err, errlen, "model '%s': key 'dropout' given twice", spec);
    *seen = 1;
    char num[40], *stop;
    int len = (int)(end - eq - 1);
    snprintf(num, sizeof num, "%.*s", len, eq + 1);
    errno = 0;
    double v = len > 0 && len < (int)sizeof num ? strtod(num, &stop) : -1;
    if (len <= 0 || len >= (int)sizeof num || *stop || errno || !(v >= 0 && v < 1) || !strchr("0123456789.", num[0]))
        return ir_errf(err, errlen, "model '%s': bad dropout '%.*s' (expected a rate in [0, 1), e.g. dropout=0.1)", spec,
                       len, eq + 1);
    cfg->dropout = v;
    return 0;
}

/* Checks a filled config against its model's rules: every key positive
 * and within its limit, then the family's own rules and its largest tensors
 * against the IR's element limit.  `spec` names the input in messages.
 * Returns 0 or -1 with a message. */
static int check_config(const model_def *m, const model_config *cfg, const char *spec, char *err, size_t errlen)
{
    for (int i = 0; i < m->n_keys; i++) {
        if (cfg->values[i] <= 0)
            return ir_errf(err, errlen, "model '%s': %s=%lld must be positive", spec, m->keys[i], (long long)cfg->values[i]);
        if (cfg->values[i] > m->limits[i])
            return ir_errf(err, errlen, "model '%s': %s=%lld is too large (at most %lld)", spec, m->keys[i],
                        (long long)cfg->values[i], (long long)m->limits[i]);
    }
    model_big big[MODEL_MAX_BIG];
    int n_big = m->check(cfg, spec, big, err, errlen);
    if (n_big < 0) return -1;
    for (int i = 0; i < n_big; i++)
        if (big[i].numel > MODEL_MAX_NUMEL)
            return ir_errf(err, errlen, "model '%s': too large: %s would have %.3g elements (limit 2^48)", spec,
                        big[i].what, big[i].numel);
    return 0;
}

/* Parses the decimal number in [p, end) into *out.  Returns 0, or -1 with
 * *neg set when it is a well-formed negative number. */
static int parse_int(const char *p, const char *end, int64_t *out, int *neg)
{
    *neg = 0;
    const char *q = p;
    if (q < end && *q == '-') {
        *neg = 1;
        q++;
    }
    if (q == end) return -1;
    int64_t v = 0;
    for (; q < end; q++) {
        if (*q < '0' || *q > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*q - '0');
    }
    *out = *neg ? -v : v;
    return 0;
}

/* "unknown model": the nearest name when there is one, the model families,
 * and where the presets are listed (the whole list no longer fits a line). */
static int unknown_model(const char *spec, const char *name, size_t len, char *err, size_t errlen)
{
    char word[32], words[1024], families[256];
    snprintf(word, sizeof word, "%.*s", (int)len, name);
    join_names(words, sizeof words, all_names, -1, " ");
    const char *fam[N_MODELS];
    for (int i = 1; i < N_MODELS; i++) fam[i - 1] = models[i].name;
    fam[N_MODELS - 1] = NULL;
    join_names(families, sizeof families, fam, N_MODELS - 1, ", ");
    const char *near = word[0] ? ir_nearest(word, words) : NULL;
    return ir_errf(err, errlen, "model '%s': unknown model '%s' (%s%s%smodels: %s; presets: carve models)", spec, word,
                   near ? "did you mean " : "", near ? near : "", near ? "? " : "", families);
}

/* One integer "key=value" in [p, end) of spec into cfg (seen: the keys
 * given so far).  Returns 0 or -1 with a message. */
static int parse_key(const char *spec, const model_def *m, const char *keylist, const char *p, const char *eq,
                     const char *end, model_config *cfg, int *seen, char *err, size_t errlen)
{
    int k = -1;
    for (int i = 0; i < m->n_keys; i++)
        if (strlen(m->keys[i]) == (size_t)(eq - p) && strncmp(m->keys[i], p, (size_t)(eq - p)) == 0) k = i;
    if (k < 0)
        return ir_errf(err, errlen, "model '%s': unknown key '%.*s' for %s (keys: %s)", spec, (int)(eq - p), p, m->name,
                       keylist);
    if (seen[k]) return ir_errf(err, errlen, "model '%s': key '%s' given twice", spec, m->keys[k]);
    seen[k] = 1;
    int64_t v;
    int neg;
    if (parse_int(eq + 1, end, &v, &neg) < 0)
        return ir_errf(err, errlen, "model '%s': bad number '%.*s' for key '%s' (expected a positive integer)", spec,
                       (int)(end - eq - 1), eq + 1, m->keys[k]);
    cfg->values[k] = v;
    return 0;
}

int model_parse(const char *spec, model_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    if (!spec || !spec[0]) return ir_errf(err, errlen, "model spec is empty (expected NAME or NAME:key=value,...)");
    const char *colon = strchr(spec, ':');
    size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    char name[32];
    if (name_len == 0 || name_len >= sizeof name) return unknown_model(spec, spec, name_len < 31 ? name_len : 31, err, errlen);
    memcpy(name, spec, name_len);
    name[name_len] = 0;

    const preset_def *pre = find_preset(name);
    const model_def *m = pre ? &models[pre->family] : find_model(name);
    if (!m) return unknown_model(spec, name, name_len, err, errlen);
    snprintf(cfg->model, sizeof cfg->model, "%s", m->name);
    cfg->family = (model_family)(m - models);
    if (pre) snprintf(cfg->preset, sizeof cfg->preset, "%s", pre->name);
    cfg->n_keys = m->n_keys;
    for (int i = 0; i < m->n_keys; i++) {
        cfg->keys[i] = m->keys[i];
        cfg->values[i] = pre ? pre->values[i] : m->defaults[i];
    }

    if (colon) {
        char keylist[180];
        join_names(keylist, sizeof keylist, m->keys, m->n_keys, ", ");
        if (takes_dropout(m)) snprintf(keylist + strlen(keylist), sizeof keylist - strlen(keylist), ", dropout");
        if (m->attn) snprintf(keylist + strlen(keylist), sizeof keylist - strlen(keylist), ", attention");
        int seen[MODEL_MAX_KEYS] = {0}, seen_dropout = 0, seen_attention = 0;
        const char *p = colon + 1;
        if (!*p) return ir_errf(err, errlen, "model '%s': nothing after ':' (expected key=value,...)", spec);
        for (;;) {
            const char *end = strchr(p, ',');
            if (!end) end = p + strlen(p);
            const char *eq = memchr(p, '=', (size_t)(end - p));
            if (!eq || eq == p)
                return ir_errf(err, errlen, "model '%s': expected key=value, got '%.*s'", spec, (int)(end - p), p);
            int rc = parse_dropout(spec, m, p, eq, end, cfg, &seen_dropout, err, errlen);
            if (rc > 0) rc = parse_attention(spec, m, p, eq, end, cfg, &seen_attention, err, errlen);
            if (rc < 0 || (rc > 0 && parse_key(spec, m, keylist, p, eq, end, cfg, seen, err, errlen) < 0)) return -1;
            if (!*end) break;
            p = end + 1;
            if (!*p) return ir_errf(err, errlen, "model '%s': trailing ',' (expected key=value after it)", spec);
        }
    }
    if (cfg->attention == MODEL_ATTENTION_FUSED && cfg->dropout > 0)
        return memset(cfg, 0, sizeof *cfg), ir_errf(err, errlen, "model '%s': attention=fused takes no dropout (the fused op "
                                                    "draws none on the probabilities; use attention=materialized)", spec);
    if (check_config(m, cfg, spec, err, errlen) < 0) {
        memset(cfg, 0, sizeof *cfg);
        return -1;
    }
    return 0;
}

/* ---- what the registry dispatches ------------------------------------- */

int model_batch_key(const model_config *cfg)
{
    const model_def *m = family_of(cfg);
    return m ? m->batch : -1;
}

int64_t model_param_count(const model_config *cfg)
{
    const model_def *m = family_of(cfg);
    return m ? m->params(cfg) : -1;
}

double model_forward_flops(const model_config *cfg)
{
    const model_def *m = family_of(cfg);
    return m ? m->flops(cfg) : -1;
}

double model_step_flops(const model_config *cfg) { return 3 * model_forward_flops(cfg); }

double model_step_units(const model_config *cfg, const char **unit)
{
    int64_t b = model_get(cfg, "batch"), s = model_get(cfg, "seq");
    int64_t es = model_get(cfg, "enc_seq"), ds = model_get(cfg, "dec_seq");
    *unit = "tokens";
    if (b > 0 && s > 0) return (double)b * (double)s;
    if (b > 0 && es > 0 && ds > 0) return (double)b * (double)(es + ds); /* t5: encoder and decoder tokens */
    *unit = "samples";
    return b > 0 ? (double)b : 1; /* gns: one graph a step */
}

ir_graph *model_build_forward(const model_config *cfg, char *err, size_t errlen)
{
    const model_def *m = family_of(cfg);
    if (m) return m->build(cfg, err, errlen);
    ir_errf(err, errlen, "model '%s': unknown model (parse the spec with model_parse first)", cfg->model);
    return NULL;
}

/* ---- descriptions ------------------------------------------------------ */

/* Returns the one-line description of a model or preset (a static string,
 * without the name or the configuration, which `carve models` prints beside
 * it), or NULL for an unknown name. */
const char *model_describe(const char *name)
{
    const preset_def *pre = find_preset(name);
    if (pre) return pre->about;
    const model_def *m = find_model(name);
    return m ? m->about : NULL;
}
