#!/usr/bin/python3
"""Writes MNIST-style IDX data as TFRecord shards of tf.train.Example, with
the standard library only (no TensorFlow, no protobuf package):
the Example wire format and the TFRecord framing (CRC-32C, masked) are
written by hand.

  idx_to_tfrecord.py SRC_DIR OUT_DIR [--shards=N] [--repeat=R | --target_bytes=B]

OUT_DIR gets train-0000i-of-0000N.tfrecord, test-0000i-of-0000N.tfrecord
(each split in N shards, records in the IDX order, the data repeated R
times, or as often as it takes to reach B bytes of training records) and
tfrecord_schema.json ({"image": "image", "label": "label", "shape": [H, W, 1]}).
Features: "image", a bytes_list of one value (H*W uint8 pixels), "label",
an int64_list of one class index (packed).
"""
import argparse
import gzip
import json
import os
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(number, body):
    return varint(number << 3 | 2) + varint(len(body)) + body


def example(pixels, label):
    image = field(1, field(1, pixels))                 # Feature.bytes_list
    lab = field(3, field(1, varint(int(label))))       # Feature.int64_list, packed
    entries = field(1, field(1, b"image") + field(2, image)) + \
        field(1, field(1, b"label") + field(2, lab))
    return field(1, entries)                           # Example.features


def framed(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(crc32c(length))) + data + \
        struct.pack("<I", masked(crc32c(data)))


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    # One bytes object per example (an image's pixels, or one label byte).
    body = raw[4 + 4 * dims:]
    item = 1
    for d in shape[1:]:
        item *= d
    return shape, [body[i * item:(i + 1) * item] for i in range(shape[0])]


def find(src, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(src, name)):
            return os.path.join(src, name)
    sys.exit("error: %s: no %s(.gz)" % (src, stem))


def write_split(images, labels, out_dir, prefix, shards, repeat):
    # The records of one copy are the same bytes every time: frame them once
    # (the CRC in pure Python is the slow part), write them `repeat` times.
    records = [framed(example(images[i], labels[i][0])) for i in range(len(labels))]
    total = len(records) * repeat
    per_shard = (total + shards - 1) // shards
    written = 0
    for s in range(shards):
        path = os.path.join(out_dir, "%s-%05d-of-%05d.tfrecord" % (prefix, s, shards))
        with open(path, "wb") as f:
            for r in range(s * per_shard, min(total, (s + 1) * per_shard)):
                f.write(records[r % len(records)])
                written += len(records[r % len(records)])
    return total, written


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--target_bytes", type=int, default=0)
    p.add_argument("--train_only", action="store_true")
    a = p.parse_args()
    if a.shards < 1 or a.repeat < 1:
        sys.exit("error: --shards=%d and --repeat=%d must be >= 1" % (a.shards, a.repeat))
    os.makedirs(a.out, exist_ok=True)
    splits = [("train", "train")] + ([] if a.train_only else [("t10k", "test")])
    for stem, prefix in splits:
        shape, images = read_idx(find(a.src, stem + "-images-idx3-ubyte"))
        _, labels = read_idx(find(a.src, stem + "-labels-idx1-ubyte"))
        if len(images) != len(labels):
            sys.exit("error: %s: %d images but %d labels" % (a.src, len(images), len(labels)))
        repeat = a.repeat
        if a.target_bytes and prefix == "train":
            one = len(framed(example(images[0], labels[0][0])))
            repeat = max(1, -(-a.target_bytes // (one * len(labels))))
        n, size = write_split(images, labels, a.out, prefix, a.shards, repeat if prefix == "train" else 1)
        print("%s: %d records, %d bytes in %d shards" % (prefix, n, size, a.shards))
    with open(os.path.join(a.out, "tfrecord_schema.json"), "w") as f:
        json.dump({"image": "image", "label": "label",
                   "shape": [shape[1], shape[2], 1]}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
