/* main.c - the carve command: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        printf("usage: carve <command> [options]\n");
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "carve: unknown command '%s' (see carve --help)\n", argv[1]);
    return 2;
}
