#!/usr/bin/env python3
"""Turns MNIST-format IDX files into an image folder (torchvision's ImageFolder layout):

    OUT/train/<digit>/<index>.png   from train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz]
    OUT/test/<digit>/<index>.png    from t10k-images-idx3-ubyte[.gz] + t10k-labels-idx1-ubyte[.gz]

<index> is the image's position in its IDX file, zero-padded to 5 digits, so that the files of a
class sort in IDX order. Each PNG is 28x28, 8-bit grayscale, the IDX bytes unchanged (PNG is
lossless: decoding gives back exactly the IDX pixels).

    scripts/make-image-folder.py OUT [--src DIR] [--train N] [--test N]

--src defaults to the repository's examples/data/mnist-sample; --train/--test keep the first N
images of each part (default: all). Python 3 standard library only (zlib + struct).
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "examples", "data", "mnist-sample")


def read_idx(path):
    """The array of an IDX file (plain or gzipped): (dims, bytes)."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with open(p, "rb") as f:
                data = f.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            magic = struct.unpack(">I", data[:4])[0]
            nd = magic & 0xFF
            dims = struct.unpack(">" + "I" * nd, data[4 : 4 + 4 * nd])
            return dims, data[4 + 4 * nd :]
    sys.exit(f"{path}: not found (nor {path}.gz)")


def chunk(kind, payload):
    body = kind + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))


def png_gray(pixels, height, width):
    """A PNG of 8-bit grayscale `pixels` (row-major bytes), every row with filter 0."""
    rows = b"".join(b"\x00" + pixels[y * width : (y + 1) * width] for y in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def write_part(src, out, images, labels, limit):
    (n, h, w), pixels = read_idx(os.path.join(src, images))
    (nl,), digits = read_idx(os.path.join(src, labels))
    if nl != n:
        sys.exit(f"{src}: {images} holds {n} images but {labels} {nl} labels")
    n = n if limit is None else min(n, limit)
    for i in range(n):
        d = os.path.join(out, str(digits[i]))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:05d}.png"), "wb") as f:
            f.write(png_gray(pixels[i * h * w : (i + 1) * h * w], h, w))
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the folder to write (train/ and test/ are made in it)")
    p.add_argument("--src", default=SAMPLE, help="MNIST-format IDX folder (default: the sample)")
    p.add_argument("--train", type=int, default=None, help="keep the first N training images")
    p.add_argument("--test", type=int, default=None, help="keep the first N test images")
    a = p.parse_args()
    train = write_part(a.src, os.path.join(a.out, "train"), "train-images-idx3-ubyte",
                       "train-labels-idx1-ubyte", a.train)
    test = write_part(a.src, os.path.join(a.out, "test"), "t10k-images-idx3-ubyte",
                      "t10k-labels-idx1-ubyte", a.test)
    print(f"wrote {train} training and {test} test images to {a.out}")


if __name__ == "__main__":
    main()
