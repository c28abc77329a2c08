/* quant/scheme.c: building and validating quantization schemes (spec §4.1, §4.2). */
#include <string.h>

#include "../dispatch/internal.h"

static const char *const qvalue_names[EMBER_QVALUE_COUNT] = {"Q8F", "Q8S",  "Q4F",  "Q4S", "Q2F",
                                                             "Q2S", "E4M3", "E5M2", "E2M1"};
static const char *const qstore_names[EMBER_QSTORE_COUNT] = {"Native", "PackedU32", "PackedNative"};
static const char *const scale_names[EMBER_SCALE_DTYPE_COUNT] = {"F32", "F16", "BF16", "UE8M0",
                                                                 "UE4M3"};

const char *ember_qvalue_name(ember_qvalue v) {
    return (unsigned)v < EMBER_QVALUE_COUNT ? qvalue_names[v] : "unknown";
}
const char *ember_qstore_name(ember_qstore s) {
    return (unsigned)s < EMBER_QSTORE_COUNT ? qstore_names[s] : "unknown";
}
const char *ember_scale_dtype_name(ember_scale_dtype d) {
    return (unsigned)d < EMBER_SCALE_DTYPE_COUNT ? scale_names[d] : "unknown";
}

ember_qscheme ember_qscheme_per_tensor(ember_qvalue v, ember_qstore s) {
    ember_qscheme q;
    memset(&q, 0, sizeof q);
    q.value = v;
    q.store = s;
    q.block_scale = EMBER_SCALE_F32;
    q.tensor_scale = EMBER_SCALE_F32;
    q.mode = EMBER_QMODE_SYMMETRIC;
    return q;
}

ember_qscheme ember_qscheme_per_block(ember_qvalue v, ember_qstore s, int rank,
                                      const int64_t *block) {
    ember_qscheme q = ember_qscheme_per_tensor(v, s);
    q.block_rank = rank;
    if (block && rank > 0)
        for (int i = 0; i < rank && i < EMBER_MAX_BLOCK_RANK; i++)
            q.block[i] = block[i];
    return q;
}

static int is_sub_byte(ember_qvalue v) {
    return v == EMBER_Q4F || v == EMBER_Q4S || v == EMBER_Q2F || v == EMBER_Q2S || v == EMBER_E2M1;
}

/* The checks of ember_qscheme_validate; `record` 0 keeps ember_last_error() untouched. */
static ember_status check(const ember_qscheme *s, int record) {
#define REJECT(code, ...)                                                                          \
    do {                                                                                           \
        if (record)                                                                                \
            EMBER_FAIL(code, __VA_ARGS__);                                                         \
        return code;                                                                               \
    } while (0)
    if (!s)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme is NULL");
    if ((unsigned)s->value >= EMBER_QVALUE_COUNT)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme: bad value %d", (int)s->value);
    if ((unsigned)s->store >= EMBER_QSTORE_COUNT)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme: bad store %d", (int)s->store);
    if ((unsigned)s->mode >= EMBER_QMODE_COUNT)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme: bad mode %d", (int)s->mode);
    if ((unsigned)s->block_scale >= EMBER_SCALE_DTYPE_COUNT ||
        (unsigned)s->tensor_scale >= EMBER_SCALE_DTYPE_COUNT)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme: bad scale dtype");
    if (s->mode == EMBER_QMODE_LOOKUP)
        REJECT(EMBER_ERR_UNSUPPORTED_SCHEME,
               "lookup quantization is not supported (QuantMode::Lookup, %s)",
               qvalue_names[s->value]);
    if (s->store == EMBER_QSTORE_NATIVE && is_sub_byte(s->value))
        REJECT(EMBER_ERR_SUB_BYTE_NATIVE,
               "Can't store native sub-byte values (%s with store Native)", qvalue_names[s->value]);
    if (s->store == EMBER_QSTORE_PACKED_NATIVE && s->value != EMBER_E2M1)
        REJECT(EMBER_ERR_UNSUPPORTED_SCHEME, "%s doesn't support native packing",
               qvalue_names[s->value]);
    if (s->store != EMBER_QSTORE_NATIVE && s->packing_dim != 0)
        REJECT(EMBER_ERR_PACKED_SHAPE,
               "Can't store in u32: packing must be on the innermost dimension (packing_dim %d, "
               "expected 0)",
               s->packing_dim);
    if (s->block_rank < 0 || s->block_rank > EMBER_MAX_BLOCK_RANK)
        REJECT(EMBER_ERR_INVALID_ARGUMENT, "scheme: block rank %d is outside 0..%d", s->block_rank,
               EMBER_MAX_BLOCK_RANK);
    for (int i = 0; i < s->block_rank; i++)
        if (s->block[i] < 1 || s->block[i] > 255)
            REJECT(EMBER_ERR_INVALID_ARGUMENT,
                   "scheme: block dim %d is %lld; burn's BlockSize holds dims in 1..255", i,
                   (long long)s->block[i]);
    if (s->block_rank > 0) {
        if (s->block_scale == EMBER_SCALE_UE8M0)
            REJECT(EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported (block scales)");
        if (s->tensor_level) {
            if (s->tensor_scale == EMBER_SCALE_UE8M0)
                REJECT(EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported (tensor scale)");
            if (s->tensor_scale != EMBER_SCALE_F32)
                REJECT(EMBER_ERR_UNSUPPORTED_SCHEME,
                       "a two-level scheme stores its per-tensor scale as f32, got %s",
                       scale_names[s->tensor_scale]);
            if (s->block_scale == EMBER_SCALE_F32 || s->block_scale == EMBER_SCALE_BF16)
                REJECT(EMBER_ERR_UNSUPPORTED_SCHEME,
                       "block scales in %s reach f32's range, which a per-tensor scale cannot "
                       "absorb",
                       scale_names[s->block_scale]);
        }
    } else if (s->tensor_scale == EMBER_SCALE_UE8M0) {
        REJECT(EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported (tensor scale)");
    }
    return EMBER_OK;
#undef REJECT
}

ember_status ember_qscheme_validate(const ember_qscheme *s) { return check(s, 1); }

int ember__qscheme_is_valid(const ember_qscheme *s) { return check(s, 0) == EMBER_OK; }
