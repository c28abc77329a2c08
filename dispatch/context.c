/* dispatch/context.c: contexts, configuration and device queries.
 *
 * Configuration is read from the environment in one place, config_load(), at context creation;
 * the same settings can be given through ember_options, which win. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define EMBER__STR_(x) #x
#define EMBER__STR(x) EMBER__STR_(x)

ember_options ember_options_default(void) {
    ember_options o;
    memset(&o, 0, sizeof o);
    o.num_threads = 0;
    o.cpu_max_isa = NULL;
    o.enable_opencl = 1;
    o.quant_propagation = EMBER_QUANT_INHIBIT;
    o.dynamic_activation_quant = 0;
    o.cpu_buffer_cache_mib = -1;
    o.opencl_buffer_cache_mib = -1;
    o.cpu_pin_threads = -1;
    o.cpu_spin_us = -1;
    return o;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    if (!src) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, cap, "%s", src);
}

static int isa_valid(const char *s) {
    static const char *const names[] = {"scalar", "avx2", "avx512_vnni", "amx"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0)
            return 1;
    return 0;
}

/* A long long option that -1 leaves to the variable `var` (when set), else to the backend's
 * default: the variable must be an integer in 0 .. max (`unit` says what, in the message), the
 * option -1 or in 0 .. max (`max_text`, the bound as the message writes it). */
static ember_status ll_option(const char *field, const char *var, const char *unit, long long max,
                              const char *max_text, long long *v) {
    const char *env;
    if (*v == -1 && (env = getenv(var)) && *env) {
        char *end;
        long long n = strtoll(env, &end, 10);
        EMBER_FAIL_IF(*end || n < 0 || n > max, EMBER_ERR_INVALID_ARGUMENT,
                      "context_create: %s=\"%s\" is not %s", var, env, unit);
        *v = n;
    }
    EMBER_FAIL_IF(*v < -1 || *v > max, EMBER_ERR_INVALID_ARGUMENT,
                  "context_create: %s %lld is outside -1 .. %s", field, *v, max_text);
    return EMBER_OK;
}

/* A buffer cache's size in MiB: the option when not -1, else the variable `var` when set, else -1
 * (the backend's default). */
static ember_status cache_mib(const char *field, const char *var, long long *mib) {
    return ll_option(field, var, "a size in MiB (0 .. 2^30; 0 turns the cache off)",
                     (long long)1 << 30, "2^30", mib);
}

/* Resolve options: explicit fields first, then the environment, then the defaults. */
static ember_status config_load(ember_context *ctx, const ember_options *opts) {
    ember_options o = opts ? *opts : ember_options_default();
    const char *env;

    if (o.num_threads == 0 && (env = getenv("EMBER_NUM_THREADS")) && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        EMBER_FAIL_IF(*end || n < 1 || n > 1024, EMBER_ERR_INVALID_ARGUMENT,
                      "context_create: EMBER_NUM_THREADS=\"%s\" is not a thread count in 1..1024",
                      env);
        o.num_threads = (int)n;
    }
    EMBER_FAIL_IF(o.num_threads < 0 || o.num_threads > 1024, EMBER_ERR_INVALID_ARGUMENT,
                  "context_create: num_threads %d is outside 0..1024", o.num_threads);

    const char *isa = o.cpu_max_isa;
    if (!isa && (env = getenv("EMBER_CPU_MAX_ISA")) && *env)
        isa = env;
    if (isa) {
        EMBER_FAIL_IF(
            !isa_valid(isa), EMBER_ERR_INVALID_ARGUMENT,
            "context_create: cpu_max_isa \"%s\" is not one of scalar|avx2|avx512_vnni|amx", isa);
        copy_str(ctx->isa, sizeof ctx->isa, isa);
        o.cpu_max_isa = ctx->isa;
    }
    EMBER_FAIL_IF(o.enable_opencl != 0 && o.enable_opencl != 1, EMBER_ERR_INVALID_ARGUMENT,
                  "context_create: enable_opencl must be 0 or 1, got %d", o.enable_opencl);
    EMBER_FAIL_IF((unsigned)o.quant_propagation >= EMBER_QUANT_PROPAGATION_COUNT,
                  EMBER_ERR_INVALID_ARGUMENT, "context_create: bad quant_propagation %d",
                  (int)o.quant_propagation);
    EMBER_FAIL_IF(o.dynamic_activation_quant != 0 && o.dynamic_activation_quant != 1,
                  EMBER_ERR_INVALID_ARGUMENT,
                  "context_create: dynamic_activation_quant must be 0 or 1, got %d",
                  o.dynamic_activation_quant);

    if (o.cpu_pin_threads == -1 && (env = getenv("EMBER_CPU_PIN")) && *env) {
        EMBER_FAIL_IF(strcmp(env, "0") != 0 && strcmp(env, "1") != 0, EMBER_ERR_INVALID_ARGUMENT,
                      "context_create: EMBER_CPU_PIN=\"%s\" is not 0 or 1", env);
        o.cpu_pin_threads = env[0] - '0';
    }
    EMBER_FAIL_IF(o.cpu_pin_threads < -1 || o.cpu_pin_threads > 1, EMBER_ERR_INVALID_ARGUMENT,
                  "context_create: cpu_pin_threads must be -1, 0 or 1, got %d", o.cpu_pin_threads);
    EMBER_TRY(ll_option("cpu_spin_us", "EMBER_CPU_SPIN_US",
                        "a time in microseconds (0 .. " EMBER__STR(EMBER_CPU_SPIN_US_MAX) ")",
                        EMBER_CPU_SPIN_US_MAX, EMBER__STR(EMBER_CPU_SPIN_US_MAX), &o.cpu_spin_us));
    EMBER_TRY(
        cache_mib("cpu_buffer_cache_mib", "EMBER_CPU_BUFFER_CACHE_MIB", &o.cpu_buffer_cache_mib));
    EMBER_TRY(cache_mib("opencl_buffer_cache_mib", "EMBER_OPENCL_BUFFER_CACHE_MIB",
                        &o.opencl_buffer_cache_mib));

    copy_str(ctx->opencl_platform, sizeof ctx->opencl_platform, getenv("EMBER_OPENCL_PLATFORM"));
    copy_str(ctx->opencl_device, sizeof ctx->opencl_device, getenv("EMBER_OPENCL_DEVICE"));
    copy_str(ctx->opencl_cache_dir, sizeof ctx->opencl_cache_dir, getenv("EMBER_OPENCL_CACHE_DIR"));
    copy_str(ctx->opencl_kernel, sizeof ctx->opencl_kernel, getenv("EMBER_OPENCL_KERNEL"));
    if ((env = getenv("EMBER_LOG")) && *env) {
        if (strcmp(env, "debug") == 0 || strcmp(env, "2") == 0)
            ember__log_level = 2;
        else if (strcmp(env, "error") == 0 || strcmp(env, "1") == 0)
            ember__log_level = 1;
        else
            ember__log_level = 0;
    }
    ctx->opts = o;
    return EMBER_OK;
}

ember_status ember_context_create(const ember_options *opts, ember_context **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "context_create: out is NULL");
    *out = NULL;
    ember_context *ctx = ember__calloc(1, sizeof *ctx);
    EMBER_FAIL_IF(!ctx, EMBER_ERR_OUT_OF_MEMORY, "context_create: no memory for the context");
    ember_status st = config_load(ctx, opts);
    if (st != EMBER_OK) {
        ember__free(ctx);
        return st;
    }
    ctx->magic = EMBER__CONTEXT_MAGIC;
    for (int b = 0; b < EMBER_BACKEND_COUNT; b++) {
        const ember_backend_ops *ops = ember__backend_ops((ember_backend)b);
        if (!ops)
            continue;
        if (b == EMBER_BACKEND_OPENCL && !ctx->opts.enable_opencl)
            continue;
        st = ops->init(ctx, &ctx->opts, &ctx->be[b].state);
        if (st != EMBER_OK) {
            ember_context_destroy(ctx);
            return st;
        }
        ctx->be[b].ops = ops;
    }
    *out = ctx;
    return EMBER_OK;
}

void ember_context_destroy(ember_context *ctx) {
    if (!ctx || ctx->magic != EMBER__CONTEXT_MAGIC)
        return;
    for (int b = EMBER_BACKEND_COUNT - 1; b >= 0; b--)
        if (ctx->be[b].ops)
            ctx->be[b].ops->shutdown(ctx->be[b].state);
    ctx->magic = EMBER__DEAD_MAGIC;
    ember__free(ctx);
}

ember_status ember_context_trim(ember_context *ctx) {
    EMBER_TRY(ember__check_context(ctx, "context_trim"));
    for (int b = 0; b < EMBER_BACKEND_COUNT; b++)
        if (ctx->be[b].ops && ctx->be[b].ops->trim)
            ctx->be[b].ops->trim(ctx->be[b].state);
    return EMBER_OK;
}

ember_status ember__check_context(const ember_context *ctx, const char *what) {
    EMBER_FAIL_IF(!ctx, EMBER_ERR_MISUSE, "%s: context is NULL", what);
    EMBER_FAIL_IF(ctx->magic != EMBER__CONTEXT_MAGIC, EMBER_ERR_MISUSE,
                  "%s: not a live ember context (freed or foreign pointer)", what);
    return EMBER_OK;
}

const ember_backend_ops *ember__ops_of(const ember_context *ctx, ember_backend b) {
    return ((unsigned)b < EMBER_BACKEND_COUNT) ? ctx->be[b].ops : NULL;
}

void *ember__state_of(const ember_context *ctx, ember_backend b) {
    return ((unsigned)b < EMBER_BACKEND_COUNT) ? ctx->be[b].state : NULL;
}

int ember_device_count(const ember_context *ctx, ember_backend b) {
    if (!ctx || ctx->magic != EMBER__CONTEXT_MAGIC || (unsigned)b >= EMBER_BACKEND_COUNT ||
        !ctx->be[b].ops)
        return 0;
    return ctx->be[b].ops->device_count(ctx->be[b].state);
}

const char *ember_backend_name(ember_backend b) {
    switch (b) {
    case EMBER_BACKEND_CPU:
        return "cpu";
    case EMBER_BACKEND_OPENCL:
        return "opencl";
    default:
        return "unknown";
    }
}

const char *ember__device_str(ember_device d, char *buf, size_t cap) {
    snprintf(buf, cap, "%s:%d", ember_backend_name(d.backend), d.index);
    return buf;
}

ember_status ember__check_device(const ember_context *ctx, ember_device dev, const char *what) {
    EMBER_FAIL_IF((unsigned)dev.backend >= EMBER_BACKEND_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "%s: bad backend value %d", what, (int)dev.backend);
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    EMBER_FAIL_IF(!ops, EMBER_ERR_BACKEND_UNAVAILABLE,
                  "%s: the %s backend is not available in this context", what,
                  ember_backend_name(dev.backend));
    int n = ops->device_count(ctx->be[dev.backend].state);
    EMBER_FAIL_IF(dev.index < 0 || dev.index >= n, EMBER_ERR_BACKEND_UNAVAILABLE,
                  "%s: no device %s:%d (the %s backend has %d device%s)", what,
                  ember_backend_name(dev.backend), dev.index, ember_backend_name(dev.backend), n,
                  n == 1 ? "" : "s");
    return EMBER_OK;
}

ember_status ember_device_describe(const ember_context *ctx, ember_device d,
                                   ember_device_info *out) {
    EMBER_TRY(ember__check_context(ctx, "device_describe"));
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "device_describe: out is NULL");
    EMBER_TRY(ember__check_device(ctx, d, "device_describe"));
    ember_device_info info;
    memset(&info, 0, sizeof info);
    EMBER_TRY(ctx->be[d.backend].ops->device_describe(ctx->be[d.backend].state, d.index, &info));
    *out = info;
    return EMBER_OK;
}

ember_status ember_device_supports(const ember_context *ctx, ember_device d, ember_op op,
                                   ember_dtype dt, const ember_qscheme *s, int *out) {
    EMBER_TRY(ember__check_context(ctx, "device_supports"));
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "device_supports: out is NULL");
    EMBER_FAIL_IF((unsigned)op >= EMBER_OP_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "device_supports: bad op value %d", (int)op);
    EMBER_FAIL_IF((unsigned)dt >= EMBER_DTYPE_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "device_supports: bad dtype value %d", (int)dt);
    EMBER_FAIL_IF(dt == EMBER_QFLOAT && !s, EMBER_ERR_INVALID_ARGUMENT,
                  "device_supports: a QFloat query needs a scheme");
    EMBER_TRY(ember__check_device(ctx, d, "device_supports"));
    const ember_backend_ops *ops = ctx->be[d.backend].ops;
    void *st = ctx->be[d.backend].state;
    if (dt == EMBER_QFLOAT) {
        if (!ember__qscheme_is_valid(s)) { /* an invalid scheme is supported nowhere */
            *out = 0;
            return EMBER_OK;
        }
    }
    int ans = ops->holds(st, d.index, dt, s);
    if (ans && op != EMBER_OP_STORE)
        ans = ops->supports ? ops->supports(st, d.index, op, dt, s) : 1;
    *out = ans ? 1 : 0;
    return EMBER_OK;
}
