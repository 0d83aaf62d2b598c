#!/usr/bin/env python3
"""How full the pages of a flashtree data file are, per page kind and leaf
value size (a stand-in for the table in the TPC-C store).

Usage:
  flashtree bench compare --workload tpcc --engines flashtree --memory 128MiB \
      --data-factor 10 --cores 0 --seconds 1 --tasks 512 --keep-data --dir D
  python3 scripts/page-fill.py D/flashtree/data.ft

Reads the node header of every 4 KiB page (format versions 3 to 5; in 5 the
first two blocks are the superblock copies, counted as another kind; layout:
docs/FORMAT.md, flashtree/src/btree/node.rs): u16 page kind at offset 4
(1 leaf, 2 inner), u16 count at 16, u16 heap bytes at 18, slots of 8 bytes
from 28 (u32 key head, u32 packed: bits 22..32 the value length). Fill =
(28 + 8 × count + heap bytes + 8 for an inner node's upper child) / 4096.
"""
import collections
import struct
import sys

PAGE = 4096
NAMES = {1: "leaf", 2: "inner"}


def main(path):
    pages = collections.Counter()
    fills = collections.defaultdict(list)
    with open(path, "rb") as f:
        while True:
            page = f.read(PAGE)
            if len(page) < PAGE:
                break
            kind = struct.unpack_from("<H", page, 4)[0]
            pages[kind] += 1
            if kind not in NAMES:
                continue
            count, heap_bytes = struct.unpack_from("<HH", page, 16)
            value_len = struct.unpack_from("<I", page, 32)[0] >> 22 if count else -1
            group = (NAMES[kind], value_len // 50 * 50 if kind == 1 and count else None)
            child_bytes = 8 if kind == 2 else 0
            fills[group].append((28 + 8 * count + heap_bytes + child_bytes) / PAGE)
    print(f"pages in the file: {sum(pages.values())}, by kind: {dict(pages)}")
    print(f"{'kind':6} {'value bytes':>12} {'pages':>8} {'fill':>6}")
    for (kind, value_len), values in sorted(fills.items(), key=lambda x: (x[0][0], x[0][1] or -1)):
        if len(values) < 100:
            continue
        label = "-" if value_len is None else f"{value_len}-{value_len + 49}"
        print(f"{kind:6} {label:>12} {len(values):>8} {sum(values) / len(values):6.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
