/* fuzz_profile.c - the carve-hw/1 reader (cost_hw_from_json): a profile that
 * loads passes cost_hw_check and round-trips exactly through its JSON. */
#include "cost/cost.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char *text = fuzz_text(data, size), err[512];
    cost_hw hw, back;
    if (cost_hw_from_json(text, "fuzz.json", &hw, err, sizeof err) < 0) {
        fuzz_check_message(err);
    } else {
        fuzz_assert(cost_hw_check(&hw, err, sizeof err) == 0);
        char *s = cost_hw_to_json(&hw);
        fuzz_assert(s);
        fuzz_assert(cost_hw_from_json(s, "back.json", &back, err, sizeof err) == 0);
        fuzz_assert(!memcmp(back.matmul_flops, hw.matmul_flops, sizeof hw.matmul_flops));
        fuzz_assert(back.node_devices == hw.node_devices && back.mem_capacity == hw.mem_capacity);
        fuzz_assert(back.n_axis_links == hw.n_axis_links && !strcmp(back.name, hw.name));
        free(s);
    }
    free(text);
    return 0;
}
