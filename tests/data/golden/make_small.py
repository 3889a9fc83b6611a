#!/usr/bin/python3
"""make_small.py - builds tests/data/golden/small.bin and small.idx independently of ingot.

It follows what Megatron-Core's IndexedDatasetBuilder does (megatron/core/datasets/
indexed_dataset.py) when preprocess_data.py adds documents: each sequence's tokens are appended to
the .bin as numpy uint16 bytes, its length to `sequence_lengths`; end_document appends
len(sequence_lengths) to `document_indices` (which starts as [0]); finalize writes the .idx:

  b"MMIDIDX\\x00\\x00" | <Q version=1 | <B dtype code (uint16 = 8) | <Q N | <Q D |
  int32 lengths[N] | int64 byte pointers[N] (exclusive cumulative sum of lengths * itemsize) |
  int64 document_indices[D]

Run from the checkout:  /usr/bin/python3 tests/data/golden/make_small.py
The documents are GPT-2 ids ("Hello world!", "The cat sat." + " On the mat.", "<|endoftext|>",
"\\n!"); the second document has two sequences, as with --split-sentences.
"""
import os
import struct

import numpy as np

DOCUMENTS = [
    [[15496, 995, 0]],
    [[464, 3797, 3332, 13], [1550, 262, 2603, 13]],
    [[50256]],
    [[198, 0]],
]
DTYPE = np.uint16
DTYPE_CODE = 8


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sequence_lengths = []
    document_indices = [0]
    with open(os.path.join(here, "small.bin"), "wb") as bin_file:
        for document in DOCUMENTS:
            for sequence in document:
                bin_file.write(np.array(sequence, dtype=DTYPE).tobytes(order="C"))
                sequence_lengths.append(len(sequence))
            document_indices.append(len(sequence_lengths))

    itemsize = np.dtype(DTYPE).itemsize
    pointers = []
    offset = 0
    for length in sequence_lengths:
        pointers.append(offset)
        offset += length * itemsize

    with open(os.path.join(here, "small.idx"), "wb") as idx_file:
        idx_file.write(b"MMIDIDX\x00\x00")
        idx_file.write(struct.pack("<Q", 1))
        idx_file.write(struct.pack("<B", DTYPE_CODE))
        idx_file.write(struct.pack("<Q", len(sequence_lengths)))
        idx_file.write(struct.pack("<Q", len(document_indices)))
        idx_file.write(np.array(sequence_lengths, dtype="<i4").tobytes(order="C"))
        idx_file.write(np.array(pointers, dtype="<i8").tobytes(order="C"))
        idx_file.write(np.array(document_indices, dtype="<i8").tobytes(order="C"))


if __name__ == "__main__":
    main()
