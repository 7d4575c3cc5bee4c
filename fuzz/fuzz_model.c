/* fuzz_model.c - the --model parser (model_parse): a spec that parses gives a
 * canonical text that parses to the same configuration. */
#include "fuzz/fuzz.h"
#include "models/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *text = fuzz_text(data, size), err[512], buf[1024];
    model_config c, back;
    if (model_parse(text, &c, err, sizeof err) < 0) {
        fuzz_check_message(err);
    } else {
        fuzz_assert(model_parse(model_config_str(&c, buf, sizeof buf), &back, err, sizeof err) == 0);
        fuzz_assert(back.n_keys == c.n_keys && !strcmp(back.model, c.model));
        for (int i = 0; i < c.n_keys; i++) fuzz_assert(back.values[i] == c.values[i]);
        (void)model_param_count(&c);
        (void)model_step_flops(&c);
    }
    free(text);
    return 0;
}
