"""combine.py: join $OUT/ember_gpu.json and $OUT/cublas.json into one table (best ember variant per
shape and path, ratio to cuBLAS int8 B column-major, share of HBM copy bandwidth for small M)."""
import json
import os

out = os.environ.get("OUT", ".")
em = {"rows": [], "fails": 0}
for name in sorted(n for n in os.listdir(out) if n.startswith("ember_") and n.endswith(".json")):
    try:
        part = json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        continue
    em["rows"] += part["rows"]
    em["fails"] += part["fails"]
    em["device"], em["driver"] = part["device"], part["driver"]
try:
    cb = json.load(open(os.path.join(out, "cublas.json")))
except OSError:
    cb = {"rows": [], "copy_tbps": 0}
ref = {(r["M"], r["N"], r["K"]): r for r in cb["rows"]}
best = {}
for r in em["rows"]:
    if not r["ok"] or r["tops"] <= 0:
        continue
    path = "wgmma" if r["variant"].startswith("wgmma") else "mma"
    key = (r["M"], r["N"], r["K"], path)
    if key not in best or r["tops"] > best[key]["tops"]:
        best[key] = r
lines = [f"device: {em['device']}, driver {em['driver']}, torch {cb.get('torch', '?')}, "
         f"d2d copy {cb['copy_tbps']:.2f} TB/s; fails: {em['fails']}",
         "",
         "| M×N×K | path | best variant | splits | µs | TOPS | cuBLAS int8 TOPS | ratio | fp8 TOPS | weights GB/s (% copy BW) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for key in sorted(best, key=lambda k: (k[0] * k[1] * k[2], k[1], k[3])):
    r = best[key]
    c = ref.get(key[:3], {})
    it = c.get("int8_tops", 0)
    bw = key[1] * key[2] / (r["us"] * 1e-6) / 1e9
    pct = 100 * bw / (cb["copy_tbps"] * 1e3) if cb["copy_tbps"] else 0
    lines.append(f"| {key[0]}×{key[1]}×{key[2]} | {key[3]} | {r['variant']} | {r['splits']} | {r['us']:.2f} | "
                 f"{r['tops']:.1f} | {it:.1f}{'*' if 'int8_padded_M' in c else ''} | "
                 f"{(r['tops'] / it if it else 0):.2f} | {c.get('fp8_tops', 0):.1f} | {bw:.0f} ({pct:.0f}%) |")
txt = "\n".join(lines)
print(txt)
open(os.path.join(out, "gpu_table.md"), "w").write(txt + "\n")
