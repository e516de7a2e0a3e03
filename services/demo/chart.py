"""A line chart as a PNG, in plain Python (zlib and struct): the demo's prompt
tokens per turn, naive against tiered. No plotting library is needed for two
lines; the numbers themselves are in the report and `report.json`.

Layout: the y axis from 0 to the largest value (labelled with it, in thousands),
a grid line at each fifth of it, x ticks every 5 turns (labelled), the lines in
their colours and a legend (a coloured square and the label) in the top left
corner, first series first.
"""

from __future__ import annotations

import struct
import zlib

Colour = tuple[int, int, int]

# 3x5 digits (and "k"), one string of 15 pixels per glyph, row by row.
_GLYPHS = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001010010010",
    "8": "111101111101111",
    "9": "111101111001111",
    "k": "100101110101101",
    "A": "010101111101101",
    "D": "110101101101110",
    "E": "111100110100111",
    "I": "111010010010111",
    "N": "110101101101101",
    "R": "110101110101101",
    "T": "111010010010010",
    "V": "101101101101010",
}
WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (215, 215, 215)
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 40


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = [bytearray(WHITE * width) for _ in range(height)]

    def dot(self, x: int, y: int, colour: Colour, size: int = 1) -> None:
        for dy in range(size):
            for dx in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    self.pixels[py][3 * px : 3 * px + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: Colour, size: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            self.dot(
                round(x0 + (x1 - x0) * i / steps), round(y0 + (y1 - y0) * i / steps), colour, size
            )

    def text(self, x: int, y: int, text: str, colour: Colour = BLACK, scale: int = 2) -> None:
        for n, char in enumerate(text):
            glyph = _GLYPHS.get(char)
            if glyph is None:
                continue
            for i, bit in enumerate(glyph):
                if bit == "1":
                    self.dot(
                        x + n * 4 * scale + (i % 3) * scale, y + (i // 3) * scale, colour, scale
                    )

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.pixels)
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9))
            + _chunk(b"IEND", b"")
        )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def line_chart(
    series: list[tuple[str, Colour, list[float]]], width: int = 900, height: int = 420
) -> bytes:
    """Each series' (label, colour, values) over x = 1..n; labels in N A I V E D R T."""
    canvas = Canvas(width, height)
    count = max(len(values) for _l, _c, values in series)
    top = max(max(values) for _l, _c, values in series) or 1.0
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def at(i: int, value: float) -> tuple[int, int]:
        x = LEFT + round(plot_w * (i / max(1, count - 1)))
        return x, TOP + plot_h - round(plot_h * value / top)

    for fifth in range(1, 6):
        y = TOP + plot_h - round(plot_h * fifth / 5)
        canvas.line(LEFT, y, LEFT + plot_w, y, GREY)
    canvas.line(LEFT, TOP, LEFT, TOP + plot_h, BLACK, 2)
    canvas.line(LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h, BLACK, 2)
    canvas.text(4, TOP - 4, f"{round(top / 1000)}k")
    canvas.text(4, TOP + plot_h - 8, "0")
    for turn in range(5, count + 1, 5):
        x, _ = at(turn - 1, 0)
        canvas.line(x, TOP + plot_h, x, TOP + plot_h + 6, BLACK, 2)
        canvas.text(x - 6, TOP + plot_h + 12, str(turn))
    for rank, (label, colour, values) in enumerate(series):
        points = [at(i, v) for i, v in enumerate(values)]
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
            canvas.line(x0, y0, x1, y1, colour, 2)
        top_y = TOP + 10 + rank * 20
        for dy in range(12):
            canvas.line(LEFT + 20, top_y + dy, LEFT + 32, top_y + dy, colour)
        canvas.text(LEFT + 40, top_y + 1, label, colour)
    return canvas.png()
