#!/usr/bin/env python3
"""fuzz/seeds.py: writes the seed corpora fuzz/corpus/<harness>/ (committed; re-run to refresh).

Each seed is an input the harness decodes into a meaningful call (see the harness's header
comment and fuzz_util.h for the byte encoding): valid tensors of every scheme family, so that the
fuzzers start from calls that get past the first checks, plus a few bad ones."""
import os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))

def out(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))

Q8F, Q8S, Q4F, Q4S, Q2F, Q2S, E4M3, E5M2, E2M1 = range(9)
NATIVE, PACKED_U32, PACKED_NATIVE = range(3)
F32, F16, BF16, UE8M0, UE4M3 = range(5)

def per_tensor(v, s):
    return [0, v, s]

def per_block(v, s, block, two_level=None):
    b = [1, len(block)] + list(block) + [0] * (5 - len(block)) + [v, s]
    b += [1, two_level] if two_level is not None else [0]
    return b

def f32(x):
    return list(struct.pack("<f", x))

def f16(x):
    return list(struct.pack("<e", x))

# ---- qbytes: scheme, rank, dims, device, lenmode, payload ----
def qbytes(name, scheme, shape, payload, dev=0, lenmode=0):
    out("qbytes", name, scheme + [len(shape) - 1] + list(shape) + [dev, lenmode] + payload)

qbytes("q8s_pt", per_tensor(Q8S, NATIVE), [2, 3], [1, 0xff, 127, 0x81, 0, 5] + f32(0.5))
qbytes("q8f_u32", per_tensor(Q8F, PACKED_U32), [2, 4], list(range(8)) + f32(0.25))
qbytes("q4s_u32", per_tensor(Q4S, PACKED_U32), [2, 8], [0x12, 0x34, 0x56, 0x07] * 2 + f32(1.0))
qbytes("q2s_u32", per_tensor(Q2S, PACKED_U32), [1, 16], [0x41, 0x10, 0x05, 0x11] + f32(2.0))
qbytes("e4m3", per_tensor(E4M3, NATIVE), [4], [0x38, 0xb8, 0x7e, 0x00] + f32(1.0))
qbytes("e5m2", per_tensor(E5M2, NATIVE), [2, 2], [0x3c, 0xbc, 0x7b, 0x01] + f32(1.0))
qbytes("e2m1", per_tensor(E2M1, PACKED_NATIVE), [2, 4], [0x21, 0x43, 0x65, 0x87] + f32(1.0))
qbytes("q8s_blk", per_block(Q8S, NATIVE, [4]), [2, 8], list(range(16)) + f32(0.5) * 4)
qbytes("q8s_blk2d", per_block(Q8S, NATIVE, [2, 2]), [2, 4], list(range(8)) + f32(0.5) * 2)
qbytes("q4s_blk_u32", per_block(Q4S, PACKED_U32, [8]), [2, 8], [0x11] * 8 + f32(0.5) * 2)
qbytes("two_level", per_block(E2M1, PACKED_NATIVE, [4], two_level=UE4M3), [2, 4],
       [0x21, 0x43, 0x65, 0x07] + [0x38, 0x40] + f32(0.5))
qbytes("two_level_f16", per_block(Q8S, NATIVE, [4], two_level=F16), [1, 8],
       list(range(8)) + f16(1.0) + f16(0.5) + f32(0.25))
qbytes("nan_scale", per_tensor(Q8S, NATIVE), [3], [1, 2, 3] + f32(float("nan")))
qbytes("neg_scale", per_tensor(Q8S, NATIVE), [3], [1, 2, 3] + f32(-2.0))
qbytes("inf_scale", per_tensor(Q8S, NATIVE), [2, 2], [1, 2, 3, 4] + f32(float("inf")))
qbytes("zero_dim", per_tensor(Q8S, NATIVE), [0, 3], f32(1.0))
qbytes("short", per_tensor(Q8S, NATIVE), [2, 3], [1, 2, 3])
qbytes("ocl", per_tensor(Q8S, NATIVE), [2, 2], [1, 2, 3, 4] + f32(0.5), dev=9)
qbytes("ocl_u32", per_tensor(Q8S, PACKED_U32), [2, 4], list(range(8)) + f32(0.5), dev=9)
qbytes("requant", per_tensor(Q8S, NATIVE), [2, 2], [1, 2, 3, 4] + f32(0.5), lenmode=32)

# ---- ops: ntensors-1, tensors (dtype, rank-1, dims, device, flags, elements), steps ----
OPS = ["matmul", "qmatmul", "linear", "add", "mul", "lxb", "lwb", "lbb", "relu", "relub",
       "softmax", "ce", "ceb", "axpy", "axpy_in", "argmax", "read", "read_many", "to_device",
       "quantize", "quantize_static", "dequantize", "dequantize_to", "backend_deq", "qread",
       "requant", "autodiff", "free", "accessors"]
I64_, I32_ = 3, 4

def tensor(dt, shape, vals=None, dev=0, flags=0):
    n = 1
    for d in shape:
        n *= d
    b = [dt, len(shape) - 1] + list(shape) + [dev, flags]
    if dt == F32:
        for i in range(n):
            v = vals[i] if vals else (i * 5 % 11) - 5
            b += [7, v & 0xff]
    elif dt == I64_:
        for i in range(n):
            b += list(struct.pack("<q", vals[i] if vals else i % 3))
    elif dt == I32_:
        for i in range(n):
            b += list(struct.pack("<i", vals[i] if vals else i % 3))
    else:
        b += [1] * (n * {1: 2, 2: 2, 5: 1, 6: 1, 7: 1}.get(dt, 1))
    return b

def step(op, a=0, b=1, c=2, arg=0, extra=()):
    return [OPS.index(op), a, b, c, arg] + list(extra)

def ops(name, tensors, steps):
    out("ops", name, [len(tensors) - 1] + sum(tensors, []) + sum(steps, []))

A = tensor(F32, [2, 3])
B = tensor(F32, [3, 4])
BIAS = tensor(F32, [4])
for op in ["matmul", "qmatmul", "linear", "add", "mul", "lxb", "lwb", "relub", "axpy",
           "axpy_in", "ce", "ceb"]:
    ops("ab_" + op, [A, B, BIAS], [step(op, 0, 1, 2, 1)])
for op in ["lbb", "relu", "softmax", "argmax", "read", "read_many", "dequantize",
           "dequantize_to", "qread", "autodiff", "free", "accessors"]:
    ops("a_" + op, [A, B], [step(op, 0, 1, 0, 1, [0, 0, 0, 0, 0])])
ops("add_bcast", [tensor(F32, [2, 1, 3]), tensor(F32, [4, 1])], [step("add", 0, 1), step("mul", 1, 0)])
ops("ce_i64", [tensor(F32, [3, 4]), tensor(I64_, [3], [0, 3, 1])],
    [step("ce", 0, 1), step("ceb", 0, 1)])
ops("ce_i32_bad", [tensor(F32, [3, 4]), tensor(I32_, [3], [0, 7, 1])], [step("ce", 0, 1)])
ops("q_then_matmul", [A, B], [step("quantize", 1, 0, 0, 0, per_tensor(Q8S, NATIVE)),
                              step("qmatmul", 0, 2), step("matmul", 2, 1), step("dequantize", 2),
                              step("qread", 2, 0, 0, 7), step("to_device", 2, 0, 0, 0, [9])])
ops("q_block", [tensor(F32, [2, 8]), tensor(F32, [8, 8])],
    [step("quantize", 1, 0, 0, 0, per_block(Q4S, PACKED_U32, [8])), step("qmatmul", 0, 2),
     step("quantize", 0, 0, 0, 0, per_block(Q8S, NATIVE, [4])), step("qmatmul", 3, 2)])
ops("q_static", [tensor(F32, [2, 4]), tensor(F32, [1], [4])],
    [step("quantize_static", 0, 1, 0, 0, per_tensor(Q8S, NATIVE)), step("dequantize", 2)])
ops("to_ocl", [A, B], [step("to_device", 0, 0, 0, 0, [9]), step("matmul", 2, 1),
                       step("to_device", 1, 0, 0, 0, [9]), step("matmul", 2, 3),
                       step("quantize", 3, 0, 0, 0, per_tensor(Q8S, NATIVE)), step("qmatmul", 2, 4),
                       step("backend_deq", 4, 0, 0, 0, [0]), step("requant", 4, 0, 0, 0, [0])])
ops("tracked", [tensor(F32, [2, 3], flags=2), tensor(F32, [3, 4], flags=4)],
    [step("matmul", 0, 1), step("lxb", 1, 0), step("relu", 0)])
ops("dtypes", [tensor(1, [2, 2]), tensor(2, [2, 2]), tensor(5, [4]), tensor(7, [4])],
    [step("matmul", 0, 1), step("add", 1, 1), step("to_device", 2, 0, 0, 0, [9]),
     step("read", 3, 0, 0, 1), step("quantize", 0, 0, 0, 0, per_tensor(Q8S, NATIVE))])
ops("foreign", [A], [step("matmul", 0xfe, 0), step("add", 0xff, 0), step("quantize", 0xfe)])
ops("nan", [tensor(F32, [2, 2]) [:-8] + [0, 0, 1, 0, 2, 0, 7, 1]], [step("quantize", 0, 0, 0, 0, per_tensor(Q8S, NATIVE)), step("softmax", 0), step("argmax", 0, 0, 0, 1)])

# ---- quantize: scheme, dtype, rank-1, dims, flags, elements ----
def quant(name, scheme, shape, dt=0, flags=0, vals=None):
    n = 1
    for d in shape:
        n *= d
    b = scheme + [dt, len(shape) - 1] + list(shape) + [flags]
    for i in range(n):
        v = vals[i] if vals else ((i * 37) % 23) - 11
        if dt == 0:
            b += [v & 0xff] if flags & 1 else [7, v & 0xff]
        else:
            b += list(struct.pack("<e", v / 4.0)) if dt == 1 else [0x80, 0x3f]
    out("quantize", name, b)

for v in range(9):
    for st in range(3):
        quant("pt_%d_%d" % (v, st), per_tensor(v, st), [2, 8], flags=2)
quant("blk_q8s", per_block(Q8S, NATIVE, [4]), [2, 8], flags=3)
quant("blk_q4s_u32", per_block(Q4S, PACKED_U32, [8]), [2, 8], flags=3)
quant("blk_2d", per_block(Q8F, NATIVE, [2, 2]), [4, 4], flags=3)
quant("blk_3d", per_block(Q8S, NATIVE, [1, 2, 4]), [2, 2, 8], flags=3)
quant("blk_ragged", per_block(Q8S, NATIVE, [3]), [2, 7], flags=3)
quant("two_level_e2m1", per_block(E2M1, PACKED_NATIVE, [4], two_level=UE4M3), [2, 8], flags=3)
quant("two_level_f16", per_block(Q8S, NATIVE, [4], two_level=F16), [2, 8], flags=3)
quant("f16", per_tensor(Q8S, NATIVE), [3, 4], dt=1)
quant("bf16", per_tensor(Q8S, NATIVE), [3, 4], dt=2)
quant("zeros", per_tensor(Q8S, NATIVE), [4], flags=1, vals=[0, 0, 0, 0])
quant("nan", per_tensor(Q8S, NATIVE), [2], vals=None)
out("quantize", "nan_raw", per_tensor(Q8S, NATIVE) + [0, 0, 2, 0, 0, 7, 3])
quant("ue8m0", per_block(Q8S, NATIVE, [4], two_level=UE8M0), [1, 8])

# ---- dispatch: steps; op 0 = make (kind, shape, device, autodiff); others (op, a, b, extra) ----
def mk(kind, shape, dev, ad=0):
    return [0, kind, shape, dev, ad]

F32K, BF16K, I64K = 0, 2, 3
def QK(scheme):  # quantized: kind 4, scheme index in the bits above 3
    return 4 + 8 * scheme

prog = {
    "to_device": mk(F32K, 0, 0) + mk(QK(0), 0, 1) + [1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 2],
    "qmatmul_apart": mk(F32K, 0, 0) + mk(QK(0), 1, 1) + mk(QK(0), 1, 0) + [2, 0, 1, 2, 0, 2, 3, 0, 1],
    "devices": mk(F32K, 0, 1) + mk(F32K, 1, 2) + [3, 0, 1, 4, 0, 1, 2, 0, 1],
    "backend_deq": mk(QK(2), 1, 1) + [5, 0, 0, 0, 5, 0, 0, 1, 5, 0, 0, 2, 6, 0, 0],
    "read_many": mk(F32K, 0, 0) + mk(QK(1), 1, 0) + [7, 0, 1, 7, 0, 0],
    "autodiff": mk(F32K, 0, 0, 1) + mk(F32K, 1, 0, 2) + mk(QK(0), 1, 0) + [3, 0, 1, 8, 2, 2, 1, 9, 1, 0, 1, 0, 0, 1],
    "quantize": mk(F32K, 1, 1) + mk(BF16K, 1, 0) + [10, 0, 0, 3, 10, 1, 1, 2, 11, 2, 2, 1, 11, 3, 3, 0],
    "i64": mk(I64K, 0, 0) + mk(F32K, 1, 0) + [3, 0, 1, 8, 0, 0, 1, 1, 0, 0, 1],
}
for k, v in prog.items():
    out("dispatch", k, v)
