#!/usr/bin/env python3
"""Draws the control room's app icons (assets/icon-*.png, assets/apple-touch-icon.png) from the
shapes of assets/icon.svg: the blue square full-bleed (a maskable icon: the platform cuts its own
shape; the glyph stays inside the central 80 % safe zone) with the white prompt glyph. Pure
Python (zlib), so the icons can be made again on any machine: python3 scripts/make_icons.py."""
import math
import struct
import zlib
from pathlib import Path

BLUE = (0x2A, 0x5B, 0xD7)
WHITE = (0xFF, 0xFF, 0xFF)
# icon.svg's strokes, in its 64-unit box: the chevron and the underscore, 6 wide, round caps.
SEGMENTS = [((18, 22), (30, 32)), ((30, 32), (18, 42)), ((34, 44), (46, 44))]
HALF_WIDTH = 3.0


def distance(p, a, b):
    (px, py), (ax, ay), (bx, by) = p, a, b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def pixels(size):
    scale = 64.0 / size
    rows = []
    for y in range(size):
        row = bytearray([0])  # PNG filter: none
        for x in range(size):
            p = ((x + 0.5) * scale, (y + 0.5) * scale)
            d = min(distance(p, a, b) for a, b in SEGMENTS)
            # One pixel of anti-aliasing at the stroke's edge.
            cover = max(0.0, min(1.0, (HALF_WIDTH - d) / scale + 0.5))
            row += bytes(round(bg + (fg - bg) * cover) for bg, fg in zip(BLUE, WHITE))
        rows.append(bytes(row))
    return b"".join(rows)


def png(size):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(pixels(size), 9)) + chunk(b"IEND", b"")


if __name__ == "__main__":
    assets = Path(__file__).resolve().parent.parent / "assets"
    for name, size in [("icon-192.png", 192), ("icon-512.png", 512), ("apple-touch-icon.png", 180)]:
        (assets / name).write_bytes(png(size))
        print(f"assets/{name}: {size}x{size}")
