/* render.c - output of an explanation through a renderer (view/view.h):
 * on stdout, or atomically into a file (nothing half-written). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

int cli_render(const char *renderer, const view_explanation *x)
{
    const view_renderer *r = view_find(renderer);
    return r && r->render(x, stdout) == 0 && fflush(stdout) == 0 ? 0 : -1;
}

int cli_render_file(const char *renderer, const view_explanation *x, const char *path, size_t *bytes, char *err, size_t errlen)
{
    const view_renderer *r = view_find(renderer);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) ir_oom(0);
    int rc = r ? r->render(x, mem) : -1;
    fclose(mem);
    if (rc < 0) ir_errf(err, errlen, "out of memory");
    else if (path) rc = ir_write_atomic(path, text, len, err, errlen);
    else rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : ir_errf(err, errlen, "cannot write to stdout");
    if (bytes) *bytes = len;
    free(text);
    return rc;
}
