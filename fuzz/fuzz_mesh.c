/* fuzz_mesh.c - the --mesh parser (shard_mesh_parse): a mesh that parses has
 * 1..4 axes, a device count equal to the product of the sizes and within the
 * limit, and its text form parses back to the same mesh. */
#include "analysis/shard.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *text = fuzz_text(data, size), err[512], buf[256];
    shard_mesh m, back;
    if (shard_mesh_parse(text, &m, err, sizeof err) < 0) {
        fuzz_check_message(err);
    } else {
        fuzz_assert(m.n_axes >= 1 && m.n_axes <= SHARD_MAX_AXES);
        int64_t n = 1;
        for (int a = 0; a < m.n_axes; a++) {
            fuzz_assert(m.sizes[a] >= 1);
            n *= m.sizes[a];
        }
        fuzz_assert(n == m.n_devices && n >= 1 && n <= SHARD_MAX_DEVICES);
        fuzz_assert(shard_mesh_parse(shard_mesh_str(&m, buf, sizeof buf), &back, err, sizeof err) == 0);
        fuzz_assert(back.n_axes == m.n_axes && back.n_devices == m.n_devices);
        for (int a = 0; a < m.n_axes; a++) fuzz_assert(!strcmp(back.names[a], m.names[a]) && back.sizes[a] == m.sizes[a]);
    }
    free(text);
    return 0;
}
