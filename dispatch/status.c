/* dispatch/status.c: the status strings (generated from EMBER_STATUS_LIST) and the per-thread
 * last-error slot. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

_Atomic int ember__log_level = 0;

const char *ember_status_name(ember_status s) {
    switch (s) {
#define EMBER__STATUS_NAME(name, value, msg)                                                       \
    case name:                                                                                     \
        return #name;
        EMBER_STATUS_LIST(EMBER__STATUS_NAME)
#undef EMBER__STATUS_NAME
    }
    return "EMBER_UNKNOWN_STATUS";
}

const char *ember_status_str(ember_status s) {
    switch (s) {
#define EMBER__STATUS_STR(name, value, msg)                                                        \
    case name:                                                                                     \
        return msg;
        EMBER_STATUS_LIST(EMBER__STATUS_STR)
#undef EMBER__STATUS_STR
    }
    return "unknown status";
}

/* One slot per thread: the detail is at most this long (longer text is cut, never overflows). */
#define EMBER__ERR_CAP 4096
static _Thread_local char err_detail[EMBER__ERR_CAP];
static _Thread_local ember_status err_status = EMBER_OK;
static _Thread_local const char *err_file = "";
static _Thread_local const char *err_func = "";
static _Thread_local int err_line = 0;

ember_status ember__fail(ember_status code, const char *file, const char *func, int line,
                         const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_detail, sizeof err_detail, fmt, ap);
    va_end(ap);
    err_status = code;
    err_file = file ? file : "";
    err_func = func ? func : "";
    err_line = line;
    if (ember__log_level >= 2)
        fprintf(stderr, "ember: %s at %s:%d (%s): %s\n", ember_status_name(code), err_file, line,
                err_func, err_detail);
    return code;
}

const char *ember_last_error(void) { return err_detail; }

ember_status ember_last_error_status(void) { return err_status; }

void ember_last_error_location(const char **file, const char **func, int *line) {
    if (file)
        *file = err_file;
    if (func)
        *func = err_func;
    if (line)
        *line = err_line;
}

void ember_clear_error(void) {
    err_detail[0] = '\0';
    err_status = EMBER_OK;
    err_file = "";
    err_func = "";
    err_line = 0;
}
