#!/usr/bin/env python3
"""Writes examples/data/tensors/: 2,000 digits of the embedded MNIST sample as tensor files.

    python3 scripts/make-tensors.py [--format safetensors|npz] [OUT_DIR]

train.safetensors holds the sample's first 1,600 training digits, test.safetensors its first 400
test digits, each as x (uint8, [N, 1, 28, 28], 0 = background, 255 = ink) and y (int64, [N],
classes 0-9). With --format npz the same arrays are written as train.npz / test.npz the way
np.savez writes them (stored x.npy and y.npy members with ZIP64 extra fields).

Plain Python (no NumPy): the files are written with struct, json and zipfile, in the layouts
safetensors and NumPy's np.savez write (the zip entries carry a fixed date, so the output is
deterministic).
"""

import argparse
import gzip
import io
import json
import os
import struct
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SAMPLE = os.path.join(ROOT, "examples", "data", "mnist-sample")
SPLITS = [("train", "train", 1600), ("test", "t10k", 400)]


def idx(path):
    """(dims, payload) of a gzipped IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def safetensors(arrays):
    """A .safetensors file of [(name, dtype, shape, bytes)]: the 8-byte header length, the JSON
    header padded with spaces to a multiple of 8 bytes, then the data in the order given."""
    header, offset = {}, 0
    for name, dtype, shape, data in arrays:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(a[3] for a in arrays)


def npy(descr, shape, data):
    """An .npy file (format 1.0) as np.save writes it."""
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npz(members):
    """An .npz as np.savez writes it: stored members opened with force_zip64=True."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as f:
                f.write(data)
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=["safetensors", "npz"], default="safetensors")
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "examples", "data", "tensors"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for part, prefix, n in SPLITS:
        (count, h, w), pixels = idx(os.path.join(SAMPLE, prefix + "-images-idx3-ubyte.gz"))
        (_,), labels = idx(os.path.join(SAMPLE, prefix + "-labels-idx1-ubyte.gz"))
        assert count >= n and (h, w) == (28, 28)
        x = pixels[:n * h * w]
        y = struct.pack("<%dq" % n, *labels[:n])
        shape = (n, 1, h, w)
        if args.format == "safetensors":
            data = safetensors([("x", "U8", shape, x), ("y", "I64", (n,), y)])
        else:
            data = npz([("x.npy", npy("|u1", shape, x)), ("y.npy", npy("<i8", (n,), y))])
        path = os.path.join(args.out, "%s.%s" % (part, args.format))
        with open(path, "wb") as f:
            f.write(data)
        print("%s: x uint8 %s, y int64 (%d,), %d bytes" % (path, list(shape), n, len(data)))


if __name__ == "__main__":
    main()
