#!/usr/bin/env python3
"""Draws docs/img/compute-share.svg from bench/compute/run.sh's series.txt.

    bench/compute/plot.py OUT_DIR/series-q30.txt docs/img/compute-share.svg

Measured: tessera's achieved share of the simulated GPU, quota 30 %, policy
force, saturating 1 ms kernels (10 ms of work kept in flight), in 100-ms
windows (and their 1-s means).
Beside it, drawn from the incumbent's published behaviour in prose only (not
measured, not run): a 30 % cap reaching ~80 % busy with a ~4 s on/off swing,
schematically on for 3.2 s at 100 %, off for 0.8 s.
Plain SVG, no plotting library needed.
"""
import sys

W, H = 900, 410
L, R, T, B = 60, 20, 40, 90
X0, X1, Y0, Y1 = 0.0, 10.0, 0.0, 100.0


def x(t):
    return L + (t - X0) / (X1 - X0) * (W - L - R)


def y(v):
    return H - B - (v - Y0) / (Y1 - Y0) * (H - T - B)


def polyline(points, colour, width, dash=None):
    d = f' stroke-dasharray="{dash}"' if dash else ''
    pts = ' '.join(f'{x(a):.1f},{y(b):.1f}' for a, b in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="{width}"{d} points="{pts}"/>'


def main():
    series, out = sys.argv[1], sys.argv[2]
    rows = []
    with open(series) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                rows.append((float(parts[1]), float(parts[2])))
    rows = [r for r in rows if r[0] <= X1][:-1]  # the last window may be partial
    steps = []
    prev = 0.0
    for t, s in rows:
        steps += [(prev, s), (t, s)]
        prev = t
    seconds = []
    for sec in range(int(X1)):
        vals = [s for t, s in rows if sec < t <= sec + 1]
        if vals:
            m = sum(vals) / len(vals)
            seconds += [(sec, m), (sec + 1, m)]
    incumbent = []
    t = 0.0
    while t < X1:
        on_end = min(t + 3.2, X1)
        incumbent += [(t, 100), (on_end, 100)]
        off_end = min(on_end + 0.8, X1)
        incumbent += [(on_end, 0), (off_end, 0)]
        t = off_end
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">Achieved share of the GPU, quota 30 %, '
           f'saturating tenant</text>']
    for v in range(0, 101, 20):
        svg.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{L - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v} %</text>')
    for s in range(0, 11):
        svg.append(f'<text x="{x(s):.1f}" y="{H - B + 18}" text-anchor="middle">{s}</text>')
    svg.append(f'<text x="{W / 2}" y="{H - B + 36}" text-anchor="middle">time (s)</text>')
    svg.append(polyline(incumbent, '#e07b00', 2, '6,4'))
    svg.append(polyline([(X0, 30), (X1, 30)], '#444', 1, '2,3'))
    svg.append(polyline(steps, '#9ab8e6', 1))
    svg.append(polyline(seconds, '#1f4fa0', 2.5))
    ly = H - 34
    svg.append(f'<line x1="{L}" x2="{L + 30}" y1="{ly}" y2="{ly}" stroke="#1f4fa0" stroke-width="2.5"/>')
    svg.append(f'<text x="{L + 36}" y="{ly + 4}">tessera, measured on the sim (1-s means; light: 100-ms windows)</text>')
    ly += 18
    svg.append(f'<line x1="{L}" x2="{L + 30}" y1="{ly}" y2="{ly}" stroke="#e07b00" stroke-width="2" '
               f'stroke-dasharray="6,4"/>')
    svg.append(f'<text x="{L + 36}" y="{ly + 4}">incumbent as described in prose, not measured: a 30 % cap reaching '
               f'~80 % busy, ~4 s on/off (schematic: on 3.2 s, off 0.8 s)</text>')
    svg.append('</svg>')
    with open(out, 'w') as f:
        f.write('\n'.join(svg) + '\n')


if __name__ == '__main__':
    main()
