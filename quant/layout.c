/* quant/layout.c: where the parts of a quantized tensor lie (burn's QuantizedBytes layout, spec
 * §4.5-§4.7): value-type facts, the block grid, block_of, packing of codes into words. */
#include <stdio.h>

#include "quant_impl.h"

static const ember__qvalue_info qvalue_info[EMBER_QVALUE_COUNT] = {
    [EMBER_Q8F] = {8, 0, -128.0f, 127.0f, 127.5f},
    [EMBER_Q8S] = {8, 0, -127.0f, 127.0f, 127.0f},
    [EMBER_Q4F] = {4, 0, -8.0f, 7.0f, 7.5f},
    [EMBER_Q4S] = {4, 0, -7.0f, 7.0f, 7.0f},
    [EMBER_Q2F] = {2, 0, -2.0f, 1.0f, 1.5f},
    [EMBER_Q2S] = {2, 0, -1.0f, 1.0f, 1.0f},
    [EMBER_E4M3] = {8, 1, -448.0f, 448.0f, 448.0f},
    [EMBER_E5M2] = {8, 1, -57344.0f, 57344.0f, 57344.0f},
    [EMBER_E2M1] = {4, 1, -6.0f, 6.0f, 6.0f},
};

const ember__qvalue_info *ember__qvalue_get_info(ember_qvalue v) {
    return (unsigned)v < EMBER_QVALUE_COUNT ? &qvalue_info[v] : &qvalue_info[EMBER_Q8S];
}

int ember__qstore_per_unit(const ember_qscheme *s) {
    switch (s->store) {
    case EMBER_QSTORE_PACKED_U32:
        return 32 / ember__qvalue_get_info(s->value)->bits;
    case EMBER_QSTORE_PACKED_NATIVE:
        return 2;
    default:
        return 1;
    }
}

int ember__qstore_unit_bytes(const ember_qscheme *s) {
    return s->store == EMBER_QSTORE_PACKED_U32 ? 4 : 1;
}

size_t ember__scale_dtype_size(ember_scale_dtype d) {
    switch (d) {
    case EMBER_SCALE_F32:
        return 4;
    case EMBER_SCALE_F16:
    case EMBER_SCALE_BF16:
        return 2;
    default:
        return 1;
    }
}

ember_scale_dtype ember__qscheme_scale_dtype(const ember_qscheme *s) {
    return s->block_rank > 0 ? s->block_scale : s->tensor_scale;
}

int ember__qscheme_two_level(const ember_qscheme *s) {
    return s->block_rank > 0 && s->tensor_level;
}

size_t ember__packed_row_bytes(const ember_qscheme *s, int64_t len) {
    size_t per = (size_t)ember__qstore_per_unit(s);
    return ((size_t)len + per - 1) / per * (size_t)ember__qstore_unit_bytes(s);
}

/* The checks and sizes for a valid scheme, without recording; *why receives a static reason on
 * failure. */
static ember_status layout(const ember_qscheme *s, int rank, const int64_t *shape,
                           ember__qlayout *L, const char **why) {
    memset(L, 0, sizeof *L);
    *why = "";
    if (rank < 1 || rank > EMBER_MAX_RANK || !shape) {
        *why = "rank outside 1..8 or shape NULL";
        return EMBER_ERR_INVALID_ARGUMENT;
    }
    size_t numel = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0) {
            *why = "negative dim";
            return EMBER_ERR_INVALID_ARGUMENT;
        }
        if ((uint64_t)shape[d] > SIZE_MAX || !ember__mul_size(numel, (size_t)shape[d], &numel)) {
            *why = "the element count overflows";
            return EMBER_ERR_SHAPE_MISMATCH;
        }
    }
    /* the block, canonicalised (leading 1s dropped) and left-padded with 1s to the rank */
    if (s->block_rank > 0) {
        int first = 0;
        while (first < s->block_rank - 1 && s->block[first] == 1)
            first++;
        int crank = s->block_rank - first;
        if (crank > rank) {
            *why = "the block has more dims than the tensor";
            return EMBER_ERR_BLOCK_SHAPE;
        }
        for (int d = 0; d < rank; d++)
            L->block_full[d] = d < rank - crank ? 1 : s->block[first + d - (rank - crank)];
        L->grid_rank = rank;
        L->nscales = 1;
        for (int d = 0; d < rank; d++) {
            /* ceil without shape + block - 1, which overflows for a dim near INT64_MAX (a
             * zero dim elsewhere keeps numel from overflowing) */
            L->grid[d] = shape[d] / L->block_full[d] + (shape[d] % L->block_full[d] != 0);
            L->nscales *= (size_t)L->grid[d]; /* <= numel: cannot overflow */
        }
    } else {
        for (int d = 0; d < rank; d++)
            L->block_full[d] = shape[d]; /* the whole tensor is one block */
        L->grid_rank = 1;
        L->grid[0] = 1;
        L->nscales = 1;
    }
    /* the values */
    size_t vb;
    if (s->store == EMBER_QSTORE_NATIVE) {
        vb = numel;
    } else {
        int64_t last = shape[rank - 1];
        size_t rows = last > 0 ? numel / (size_t)last : 0;
        if (!ember__mul_size(rows, ember__packed_row_bytes(s, last), &vb)) {
            *why = "the byte size overflows";
            return EMBER_ERR_SHAPE_MISMATCH;
        }
    }
    L->values_bytes = vb;
    L->scale_size = ember__scale_dtype_size(ember__qscheme_scale_dtype(s));
    L->scales_offset = vb;
    size_t sb = L->nscales * L->scale_size, tot;
    L->global_bytes = ember__qscheme_two_level(s) ? 4 : 0;
    if (!ember__add_size(vb, sb, &L->global_offset) ||
        !ember__add_size(L->global_offset, L->global_bytes, &tot)) {
        *why = "the byte size overflows";
        return EMBER_ERR_SHAPE_MISMATCH;
    }
    L->total_bytes = tot;
    return EMBER_OK;
}

ember_status ember__qlayout_compute(const ember_qscheme *s, int rank, const int64_t *shape,
                                    ember__qlayout *out) {
    const char *why;
    if (!ember__qscheme_is_valid(s)) {
        memset(out, 0, sizeof *out);
        return EMBER_ERR_INVALID_ARGUMENT;
    }
    return layout(s, rank, shape, out, &why);
}

static const char *block_str(const ember_qscheme *s, char *buf, size_t cap) {
    return ember__shape_str(s->block_rank, s->block, buf, cap);
}

ember_status ember__qlayout_make(const char *op, const ember_qscheme *s, int rank,
                                 const int64_t *shape, ember__qlayout *out) {
    ember_status st = ember_qscheme_validate(s);
    if (st != EMBER_OK) {
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s", ember_last_error());
        EMBER_FAIL(st, "%s: %s", op, tmp);
    }
    const char *why;
    ember__qlayout L;
    st = layout(s, rank, shape, &L, &why);
    if (st != EMBER_OK) {
        char sb[200] = "", bb[100];
        if (rank >= 1 && rank <= EMBER_MAX_RANK && shape)
            ember__shape_str(rank, shape, sb, sizeof sb);
        EMBER_FAIL(st, "%s: quantized tensor of shape %s, block %s: %s", op, sb,
                   block_str(s, bb, sizeof bb), why);
    }
    *out = L;
    return EMBER_OK;
}

ember_status ember__qlayout_check_divisible(const char *op, const ember_qscheme *s, int rank,
                                            const int64_t *shape) {
    ember__qlayout L;
    const char *why;
    if (!ember__qscheme_is_valid(s) || layout(s, rank, shape, &L, &why) != EMBER_OK ||
        s->block_rank == 0)
        return EMBER_OK; /* nothing to say here: the layout's own checks report */
    for (int d = 0; d < rank; d++) {
        if (shape[d] % L.block_full[d] != 0) {
            char sb[200], bb[100];
            EMBER_FAIL(EMBER_ERR_BLOCK_SHAPE,
                       "%s: Tensor %s must be evenly divisible by block size %s (axis %d: %lld is "
                       "not a multiple of %lld; dynamic per-block quantization needs whole blocks)",
                       op, ember__shape_str(rank, shape, sb, sizeof sb),
                       block_str(s, bb, sizeof bb), d, (long long)shape[d],
                       (long long)L.block_full[d]);
        }
    }
    return EMBER_OK;
}

int ember__qlayout_row_blocks(const ember__qlayout *L, int rank) {
    if (L->grid_rank != rank)
        return 0;
    for (int d = 0; d < rank - 1; d++)
        if (L->block_full[d] != 1)
            return 0;
    return 1;
}

size_t ember__block_of(const ember__qlayout *L, int rank, const int64_t *shape, size_t i) {
    if (L->grid_rank != rank) /* per-tensor */
        return 0;
    size_t block = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        size_t n = (size_t)shape[d];
        size_t coord = i % n;
        i /= n;
        block += coord / (size_t)L->block_full[d] * stride;
        stride *= (size_t)L->grid[d];
    }
    return block;
}

void ember__pack_codes(const ember_qscheme *s, const uint8_t *codes, size_t n, uint8_t *dst) {
    if (s->store == EMBER_QSTORE_NATIVE) {
        memcpy(dst, codes, n);
        return;
    }
    const int bits = ember__qvalue_get_info(s->value)->bits;
    const uint32_t mask = (1u << bits) - 1u;
    if (bits == 8) { /* four bytes per little-endian word: the bytes are the codes */
        memcpy(dst, codes, n);
        for (size_t i = n; i % 4; i++)
            dst[i] = 0;
        return;
    }
    if (s->store == EMBER_QSTORE_PACKED_NATIVE) { /* two fp4 per byte, element 0 in the low half */
        for (size_t i = 0; i < n; i += 2) {
            uint32_t b = codes[i] & mask;
            if (i + 1 < n)
                b |= (uint32_t)(codes[i + 1] & mask) << 4;
            dst[i / 2] = (uint8_t)b;
        }
        return;
    }
    const size_t per = (size_t)(32 / bits);
    for (size_t i = 0, w = 0; i < n; i += per, w++) {
        uint32_t word = 0;
        for (size_t j = 0; j < per && i + j < n; j++)
            word |= ((uint32_t)codes[i + j] & mask) << (j * (size_t)bits);
        dst[4 * w + 0] = (uint8_t)word;
        dst[4 * w + 1] = (uint8_t)(word >> 8);
        dst[4 * w + 2] = (uint8_t)(word >> 16);
        dst[4 * w + 3] = (uint8_t)(word >> 24);
    }
}

void ember__unpack_codes(const ember_qscheme *s, const uint8_t *src, size_t n, uint8_t *codes) {
    if (s->store == EMBER_QSTORE_NATIVE || ember__qvalue_get_info(s->value)->bits == 8) {
        memcpy(codes, src, n);
        return;
    }
    const ember__qvalue_info *vi = ember__qvalue_get_info(s->value);
    const int bits = vi->bits;
    const uint32_t mask = (1u << bits) - 1u, sign = 1u << (bits - 1);
    const size_t per = (size_t)ember__qstore_per_unit(s);
    const size_t ub = (size_t)ember__qstore_unit_bytes(s);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *u = src + (i / per) * ub;
        uint32_t word = ub == 4 ? (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                                      (uint32_t)u[3] << 24
                                : u[0];
        uint32_t raw = (word >> ((i % per) * (size_t)bits)) & mask;
        if (!vi->is_fp && (raw & sign))
            raw |= ~mask; /* sign-extend */
        codes[i] = (uint8_t)raw;
    }
}
