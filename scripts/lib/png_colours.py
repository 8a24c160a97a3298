"""Read a PNG (8-bit RGB or RGBA, non-interlaced, as Chromium writes screenshots) with the
standard library only and report its size and how many pixels are near each given colour.

usage: png_colours.py FILE '#rrggbb' ...   -> JSON {"width", "height", "distinct", "counts": {...}}
"""
import json
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, head = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if tag == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat += body
    w, h, depth, ctype, _, _, interlace = head
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise SystemExit(f"{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = read_png(sys.argv[1])
    want = {c: tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in sys.argv[2:]}
    counts = {c: 0 for c in want}
    seen = set()
    for row in rows:
        for x in range(0, len(row), bpp):
            px = (row[x], row[x + 1], row[x + 2])
            seen.add(px)
            for c, rgb in want.items():
                if all(abs(px[k] - rgb[k]) <= 6 for k in range(3)):
                    counts[c] += 1
    print(json.dumps({"width": w, "height": h, "distinct": len(seen), "counts": counts}))


if __name__ == "__main__":
    main()
