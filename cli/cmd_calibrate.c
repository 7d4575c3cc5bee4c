/* cmd_calibrate.c - `carve calibrate --out cpu.json`: measure this machine
 * (calib_profile) and write the profile atomically. */
#include <stdio.h>

#include "cli/cli.h"
#include "calib/calib.h"
#include "cost/cost.h"

int cmd_calibrate(const cli_opts *o)
{
    char err[512];
    if (!o->out) {
        cli_error("calibrate: --out FILE.json is required");
        return CLI_BAD_INPUT;
    }
    if (ir_out_check(o->out, err, sizeof err) < 0) { /* before minutes of measuring */
        cli_error("calibrate: %s", err);
        return CLI_BAD_INPUT;
    }
    cost_hw hw;
    if (calib_profile(&hw, 0, o->quiet ? NULL : stderr, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_CHECK_FAILED;
    }
    if (cost_hw_save(&hw, o->out, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    printf("wrote %s (%s)\n", o->out, hw.source);
    return CLI_OK;
}
