/* ember/dtype.h: element types, burn's quantization scheme, and the dtype traits table. */
#ifndef EMBER_DTYPE_H
#define EMBER_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include <ember/export.h>
#include <ember/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Highest tensor rank ember accepts (ranks are 1..EMBER_MAX_RANK). */
#define EMBER_MAX_RANK 8
/* Highest block rank of a per-block quantization scheme (burn's BlockSize holds up to 5 dims). */
#define EMBER_MAX_BLOCK_RANK 5

typedef enum ember_dtype {
    EMBER_F32,
    EMBER_F16,
    EMBER_BF16,
    EMBER_I64,
    EMBER_I32,
    EMBER_I8,
    EMBER_U8,
    EMBER_BOOL,   /* one byte per element, 0 or 1 */
    EMBER_QFLOAT, /* a quantized tensor: values + scales under an ember_qscheme */
    EMBER_DTYPE_COUNT
} ember_dtype;

/* Facts about a dtype, from one table indexed by the enum. */
typedef struct ember_dtype_traits {
    const char *name; /* "F32", burn's Debug spelling */
    size_t size;      /* bytes per element; 0 for EMBER_QFLOAT (depends on the scheme) */
    int is_float;     /* F32, F16, BF16 */
    int is_quantized; /* EMBER_QFLOAT */
} ember_dtype_traits;

/* The traits of dt, or NULL when dt is not a valid ember_dtype. */
EMBER_API const ember_dtype_traits *ember_dtype_get_traits(ember_dtype dt);
/* "F32", ..., "QFloat"; "unknown" for an invalid value. Never NULL. */
EMBER_API const char *ember_dtype_name(ember_dtype dt);

/* ---- Quantization scheme (burn's QuantScheme; spec/burn-semantics.md §4.1) ---- */

typedef enum ember_qvalue {
    EMBER_Q8F,  /* 8 bit, range [-128, 127] */
    EMBER_Q8S,  /* 8 bit, symmetric range [-127, 127] */
    EMBER_Q4F,  /* 4 bit, [-8, 7] */
    EMBER_Q4S,  /* 4 bit, [-7, 7] */
    EMBER_Q2F,  /* 2 bit, [-2, 1] */
    EMBER_Q2S,  /* 2 bit, [-1, 1] (ternary) */
    EMBER_E4M3, /* fp8, [-448, 448] */
    EMBER_E5M2, /* fp8, [-57344, 57344] */
    EMBER_E2M1, /* fp4, [-6, 6] */
    EMBER_QVALUE_COUNT
} ember_qvalue;

typedef enum ember_qstore {
    EMBER_QSTORE_NATIVE,        /* one value per native element (i8 / fp8 byte) */
    EMBER_QSTORE_PACKED_U32,    /* values packed LSB first into little-endian u32 words */
    EMBER_QSTORE_PACKED_NATIVE, /* E2M1 only: two fp4 values per byte */
    EMBER_QSTORE_COUNT
} ember_qstore;

typedef enum ember_scale_dtype {
    EMBER_SCALE_F32,
    EMBER_SCALE_F16,
    EMBER_SCALE_BF16,
    EMBER_SCALE_UE8M0, /* refused everywhere, as in burn: EMBER_ERR_SCALE_DTYPE */
    EMBER_SCALE_UE4M3,
    EMBER_SCALE_DTYPE_COUNT
} ember_scale_dtype;

typedef enum ember_qmode {
    EMBER_QMODE_SYMMETRIC = 0,
    EMBER_QMODE_LOOKUP, /* burn's QuantMode::Lookup: refused (EMBER_ERR_UNSUPPORTED_SCHEME) */
    EMBER_QMODE_COUNT
} ember_qmode;

typedef struct ember_qscheme {
    ember_qvalue value;
    ember_qstore store;
    int packing_dim;                     /* counted from the innermost axis; 0 = last */
    int block_rank;                      /* 0: per-tensor; else the block level is on */
    int64_t block[EMBER_MAX_BLOCK_RANK]; /* block dims, aligned to the trailing axes */
    ember_scale_dtype block_scale;
    int tensor_level; /* with block_rank > 0: two-level (global f32 scale) */
    ember_scale_dtype tensor_scale;
    ember_qmode mode; /* appended; SYMMETRIC (0) is the only one supported */
} ember_qscheme;

/* Per-tensor scheme with F32 scale, symmetric mode, packing on the innermost axis. */
EMBER_API ember_qscheme ember_qscheme_per_tensor(ember_qvalue v, ember_qstore s);
/* Per-block scheme with F32 block scales; `block` holds `rank` dims (1..5), aligned to the
 * trailing axes of the tensor. An out-of-range rank is recorded as given and refused by
 * ember_qscheme_validate() and every call that takes the scheme. */
EMBER_API ember_qscheme ember_qscheme_per_block(ember_qvalue v, ember_qstore s, int rank,
                                                const int64_t *block);
/* Check a scheme on its own (not against a shape): EMBER_OK, or the status the quantize call
 * would give (SUB_BYTE_NATIVE, UNSUPPORTED_SCHEME, PACKED_SHAPE, SCALE_DTYPE, INVALID_ARGUMENT)
 * with the detail in ember_last_error(). */
EMBER_API ember_status ember_qscheme_validate(const ember_qscheme *s);

EMBER_API const char *ember_qvalue_name(ember_qvalue v);           /* "Q8S"; "unknown" */
EMBER_API const char *ember_qstore_name(ember_qstore s);           /* "PackedU32"; "unknown" */
EMBER_API const char *ember_scale_dtype_name(ember_scale_dtype d); /* "UE4M3"; "unknown" */

#ifdef __cplusplus
}
#endif
#endif
