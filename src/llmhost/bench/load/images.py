"""The images of a workload with ``--images N``: each request carries N generated PNG images of
``--image-size``, distinct from request to request (seeded), or the same N in every request with
``--repeat-images`` (after the first, a server's media cache or prefix cache holds them).

An image is a grid of flat-coloured tiles: what the encoder costs does not depend on what the
picture shows, and tiles keep the PNG small (a photograph's size, not noise's 3 bytes a pixel), so a
request of several 896x896 images stays under a server's body limit. PNGs are written here, with numpy
and zlib: no imaging library is needed.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from dataclasses import dataclass

import numpy as np

DEFAULT_SIZE = (896, 896)  # Gemma 3's SigLIP sees 896x896
TILE = 16  # pixels a side of one flat tile


def parse_image_size(text: str) -> tuple[int, int]:
    """``WxH`` (e.g. ``896x896``) as (width, height); ValueError names the option."""
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError:
        size = (0, 0)
    if not sep or min(size) < 1:
        raise ValueError(f"--image-size: WIDTHxHEIGHT in pixels, e.g. 896x896, got {text!r}")
    return size


@dataclass(frozen=True)
class ImageSettings:
    """``count`` images of ``size`` (width, height) a request; ``repeat``: the same ones in each."""

    count: int = 0
    size: tuple[int, int] = DEFAULT_SIZE
    repeat: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("--images: a count of images per request, 0 or more")
        if min(self.size) < 1:
            raise ValueError("--image-size: width and height of at least one pixel")

    def for_request(self, index: int) -> list[str]:
        """The base64 PNGs request ``index`` carries (the same for every index with ``repeat``)."""
        request = 0 if self.repeat else index
        return [
            base64.b64encode(png(tiles(self.size, _seed(self.seed, request, i)))).decode()
            for i in range(self.count)
        ]

    def describe(self) -> dict[str, int | str | bool]:
        width, height = self.size
        return {
            "images_per_request": self.count,
            "image_size": f"{width}x{height}",
            "repeat_images": self.repeat,
        }


def _seed(seed: int, request: int, image: int) -> int:
    digest = hashlib.sha256(f"{seed}/{request}/{image}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def tiles(size: tuple[int, int], seed: int) -> np.ndarray:
    """A (height, width, 3) uint8 image of random flat-coloured TILE x TILE tiles."""
    width, height = size
    rng = np.random.default_rng(seed)
    grid = rng.integers(0, 256, (-(-height // TILE), -(-width // TILE), 3), dtype=np.uint8)
    return np.repeat(np.repeat(grid, TILE, axis=0), TILE, axis=1)[:height, :width]


def png(pixels: np.ndarray) -> bytes:
    """``pixels`` ((height, width, 3) uint8) as a PNG file: 8-bit RGB, each row unfiltered, one zlib
    stream."""
    height, width, _ = pixels.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + row.tobytes() for row in np.ascontiguousarray(pixels, dtype=np.uint8))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits a channel, RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
