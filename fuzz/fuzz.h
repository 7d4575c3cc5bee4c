/* fuzz.h - what every libFuzzer target in fuzz/ shares.
 *
 * Each target is one C file with LLVMFuzzerTestOneInput feeding the bytes to
 * one of carve's readers (graph, plan, profile, schedule, --mesh, --model).
 * A target fails only through a sanitizer report (crash, leak, undefined
 * behaviour) or fuzz_assert (a broken round trip): a refused input is fine,
 * as long as it comes with a message.  Messages may echo input bytes (even a
 * newline); the command prints them through cli_error, which writes every
 * byte that is not printable ASCII as \xNN, so each stays one line. */
#ifndef CARVE_FUZZ_H
#define CARVE_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated malloc'd copy of the input (the caller frees). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#define fuzz_assert(c)                                                                   \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz: %s:%d: assertion failed: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A refusal must say something. */
static inline void fuzz_check_message(const char *err) { fuzz_assert(err[0] != 0); }

#endif
