"""cublas_ref.py: cuBLAS int8 (torch._int_mm, B column-major) and fp8 e4m3 torch._scaled_mm
timings on the shapes of bench/gpu/qgemm_gpu.c, same method: events, 5 warm-up, 30 timed, median,
rotating over enough input copies to exceed the L2. Also the device-to-device copy bandwidth.
Writes $OUT/cublas.json and prints a table."""
import json
import math
import os
import sys

import torch

SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096),
          (128, 11008, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (1, 11008, 4096)]
WARM, REP = 5, 30


def timed(fn, nrot):
    """min over two methods of the per-call kernel time in us: (1) median of per-call event pairs,
    calls queued back to back; (2) one CUDA graph of REP calls, replay time / REP (no launch gaps)."""
    for r in range(WARM):
        fn(r % nrot)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REP)]
    for r in range(REP):
        ev[r][0].record()
        fn(r % nrot)
        ev[r][1].record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) * 1e3 for a, b in ev)
    med = ts[REP // 2]
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn(0)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for r in range(REP):
                fn(r % nrot)
        g.replay()
        torch.cuda.synchronize()
        gs = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            gs.append(a.elapsed_time(b) * 1e3 / REP)
        gs.sort()
        graph = gs[2]
    except Exception as e:  # noqa: BLE001
        print(f"  graph timing failed: {str(e)[:80]}")
        graph = float("inf")
    timed.last = (med, graph)
    return min(med, graph)


def main():
    quick = len(sys.argv) > 1 and sys.argv[1] == "quick"
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} cuda {torch.version.cuda} device {props.name} SMs {props.multi_processor_count}")
    rows = []
    # HBM: device-to-device copy of 4 GiB (bytes read + written)
    x = torch.empty(1 << 31, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    us = timed(lambda r: y.copy_(x), 1)
    bw = 2 * x.numel() / (us * 1e-6) / 1e12
    print(f"d2d copy: {us:.1f} us, {bw:.2f} TB/s (read+write)")
    del x, y
    for (M, N, K) in SHAPES:
        if quick and M == 8192:
            continue
        nrot = max(1, min(16, math.ceil(256e6 / (M * K + K * N))))
        A = [torch.randint(-128, 128, (M, K), dtype=torch.int8, device=dev) for _ in range(nrot)]
        Bt = [torch.randint(-128, 128, (N, K), dtype=torch.int8, device=dev) for _ in range(nrot)]
        row = {"M": M, "N": N, "K": K}
        # cuBLAS int8, B column-major ([K,N] view of an [N,K] contiguous tensor)
        Mp = M
        try:
            torch._int_mm(A[0], Bt[0].t())
        except RuntimeError as e:
            Mp = 32  # _int_mm needs M > 16 in some versions: pad M, report as such
            row["int8_padded_M"] = Mp
            A = [torch.randint(-128, 128, (Mp, K), dtype=torch.int8, device=dev) for _ in range(nrot)]
            print(f"  _int_mm M={M} refused ({str(e)[:80]}), timing M={Mp}")
        ref = torch._int_mm(A[0], Bt[0].t())
        chk = (A[0][:4].to(torch.float64) @ Bt[0].t().to(torch.float64)).to(torch.int64)
        assert torch.equal(chk, ref[:4].to(torch.int64)), "int_mm check"
        us = timed(lambda r: torch._int_mm(A[r], Bt[r].t()), nrot)
        row["int8_us"] = us
        row["int8_us_events"], row["int8_us_graph"] = timed.last
        row["int8_tops"] = 2 * M * N * K / (us * 1e-6) / 1e12
        # fp8 e4m3 _scaled_mm (B column-major), M padded to 16
        Mf = max(16, (M + 15) // 16 * 16)
        Af = [torch.randn(Mf, K, device=dev).to(torch.float8_e4m3fn) for _ in range(nrot)]
        Bf = [torch.randn(N, K, device=dev).to(torch.float8_e4m3fn) for _ in range(nrot)]
        one = torch.tensor(1.0, device=dev)
        try:
            us = timed(lambda r: torch._scaled_mm(Af[r], Bf[r].t(), scale_a=one, scale_b=one,
                                                  out_dtype=torch.bfloat16), nrot)
            row["fp8_us"] = us
            row["fp8_tops"] = 2 * M * N * K / (us * 1e-6) / 1e12
            if Mf != M:
                row["fp8_padded_M"] = Mf
        except RuntimeError as e:
            print(f"  fp8 {M}x{N}x{K}: {str(e)[:100]}")
        # streaming floor: int8 weights once
        row["weights_floor_us"] = N * K / (bw * 1e12 / 2) * 1e6  # copy BW counts r+w; reading alone ~ same rate
        rows.append(row)
        print(f"{M}x{N}x{K}: int8 {row['int8_us']:.2f} us (events {row['int8_us_events']:.2f}, graph "
              f"{row['int8_us_graph']:.2f}) {row['int8_tops']:.1f} TOPS | "
              f"fp8 {row.get('fp8_us', 0):.2f} us {row.get('fp8_tops', 0):.1f} TOPS", flush=True)
        del A, Bt, Af, Bf
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "cublas.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": props.name, "copy_tbps": bw, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
