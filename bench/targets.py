#!/usr/bin/env python3
"""Check each 2-thread table of a bench_qgemm log against issue 5's targets.

Usage: python3 bench/targets.py LOG [LOG ...]
A table starts at a line "== table NAME TIME" (the device scripts print one before each run of
bench_qgemm) or, failing that, at each "## threads 2:" header. Ratios are computed from the GOPS
columns (not the rounded ratio columns), so a ratio printed as 1.50 may still read as a miss.
Targets: cached e_q8 >= 1.5x oneDNN reordered at 1024^3 / 2048^3 / 4096^3 and M = 32 / 128 / 512
(K = N = 4096) and 128 x 11008 x 4096; >= 40% of the AMX peak at 2048^3; first calls >= 1.2x
oneDNN without reorder at those shapes and M = 1 / 8; M = 1 and M = 8 >= 90% of the in-round
roofline; Q4 / Q8 >= 1.7 at M = 1; >= 5x OpenBLAS sgemm from 1024^3.
Where the header gives it, the AMX peak of one thread alone and the two threads' multiple of it
follow the peak: near 1 the two threads share one tile unit (the issue's machine), near 2 each
has its own.
After the tables, a summary: for each target, the tables that meet it, of all and of those whose
header says "one tile unit shared" (bench_qgemm's own verdict on the multiple, as on the issue's
machine).
"""
import math
import re
import sys

SQ = ('1024,1024,1024', '2048,2048,2048', '4096,4096,4096')
MS = ('32,4096,4096', '128,4096,4096', '512,4096,4096', '128,11008,4096')
FC = SQ + ('1,4096,4096', '8,4096,4096') + MS
FCN = ('1024', '2048', '4096', 'M1', 'M8', 'M32', 'M128', 'M512', 'N11008')
TARGETS = ('cached', 'peak', 'first', 'roofline', 'q4/q8', 'blas')


def tables(path):
    out, cur, two = [], None, True  # two: inside a 2-thread section
    for line in open(path):
        if line.startswith('== table'):
            f = line.split()
            cur = {'name': f[2], 'time': f[3] if len(f) > 3 else '', 'rows': {}}
            out.append(cur)
            continue
        m = re.match(r'## threads (\d+): AMX peak (\d+)', line)
        if m:
            two = m.group(1) == '2'
            if two and (cur is None or 'peak' in cur):  # no "== table" line before this one
                cur = {'name': str(len(out) + 1), 'time': '', 'rows': {}}
                out.append(cur)
            if two:
                cur['peak'] = int(m.group(2))
                a = re.search(r'one thread alone (\d+): x([\d.]+)', line)
                if a:  # logs from 2026-12-02 on: is the tile unit shared by the two threads?
                    cur['alone'] = (int(a.group(1)), float(a.group(2)))
                    cur['shared'] = 'one tile unit shared' in line
            continue
        m = re.match(r'^(\d+,\d+,\d+)\s+(.*)', line)
        if m and two and cur is not None and '|' in line:
            left, right = m.group(2).split('|', 1)
            g = [float(x) for x in left.split()]
            cur['rows'][m.group(1)] = {'e8': g[0], 'e8f': g[1], 'e4': g[2], 'dr': g[4],
                                       'dp': g[5], 'blas': g[6], 'pk': right.split()[4],
                                       'line': line}
    return [t for t in out if all(s in t['rows'] for s in FC)]


def check(t):
    r, miss = t['rows'], []
    sq = [r[s]['e8'] / r[s]['dr'] for s in SQ]
    ms = [r[s]['e8'] / r[s]['dr'] for s in MS]
    fc = [r[s]['e8f'] / r[s]['dp'] for s in FC]
    pk = float(r['2048,2048,2048']['pk'].rstrip('%'))
    roof = [int(re.search(r'roofline (\d+)%', r[s]['line']).group(1))
            for s in ('1,4096,4096', '8,4096,4096')]
    q = r['1,4096,4096']['e4'] / r['1,4096,4096']['e8']
    e4 = re.search(r'e_q4 (\d+)% of \d+ \(q4/q8 ceiling ([\d.]+)', r['1,4096,4096']['line'])
    big = [s for s in r if math.prod(int(x) for x in s.split(',')) >= 1024 ** 3]
    bl = [r[s]['e8'] / r[s]['blas'] for s in big]
    miss += [f'cached {n}:{v:.2f}' for n, v in zip(('1024', '2048', '4096'), sq) if v < 1.5]
    miss += [f'cached {n}:{v:.2f}' for n, v in zip(('32', '128', '512', '11008'), ms) if v < 1.5]
    if pk < 40:
        miss.append(f'peak {pk:.0f}%')
    miss += [f'first {n}:{v:.2f}' for n, v in zip(FCN, fc) if v < 1.2]
    if min(roof) < 90:
        miss.append(f'roofline {roof[0]}/{roof[1]}')
    if q < 1.7:
        miss.append(f'q4/q8 {q:.2f}')
    if min(bl) < 5:
        miss.append(f'blas {min(bl):.1f}')
    t['miss'] = {g for g in TARGETS for x in miss if x.startswith(g)}
    e4s = f' (e_q4 {e4.group(1)}% of its roofline, ceiling {e4.group(2)})' if e4 else ''
    al = f" (one thread alone {t['alone'][0]}, x{t['alone'][1]:.2f})" if 'alone' in t else ''
    return (f"table {t['name']} {t['time']} peak {t.get('peak')}{al}: cached sq "
            f"{[round(x, 2) for x in sq]} M {[round(x, 2) for x in ms]} %pk {pk:.0f} first "
            f"{[round(x, 2) for x in fc]} roof {roof[0]}/{roof[1]} q4/q8 {q:.2f}{e4s} blas "
            f"{min(bl):.1f}-{max(bl):.1f} | " + ('MISS: ' + '; '.join(miss) if miss else 'ALL MET'))


def summary(ts):
    shared = [t for t in ts if t.get('shared')]
    lines = [f'summary: {len(ts)} tables, {len(shared)} with one tile unit shared']
    for g in TARGETS + ('every target',):
        def met(t):
            return not t['miss'] if g == 'every target' else g not in t['miss']
        lines.append(f'  {g:<13} {sum(map(met, ts))} of {len(ts)}; shared '
                     f'{sum(map(met, shared))} of {len(shared)}')
    return '\n'.join(lines)


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ts = []
    for path in sys.argv[1:]:
        got = tables(path)
        if len(sys.argv) > 2:
            print('#', path)
        for t in got:
            print(check(t))
        if not got:
            print('no complete 2-thread table in', path)
        ts += got
    if ts:
        print(summary(ts))
