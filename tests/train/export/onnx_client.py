"""A real client of `cutrain export`: ONNX's checker and onnxruntime, against `cutrain predict`.

    onnx_client.py --model M.onnx --idx t10k-images-idx3-ubyte.gz --predictions P.csv
                   [--channels 1|3]

Reads the images straight from the IDX file (the same pixels as the lossless PGM files the
test gave `cutrain predict`, with no image library in between), feeds them to the graph as its
metadata says (uint8 pixels, or float pixels/255), and compares with predict's CSV (--csv):
the same top-1 for every image and every probability within 1e-5. Also checks the graph with
onnx.checker (full check: strict shape inference) and that a single image gives what the batch
gave it (the batch dimension is free). Prints a summary; exits 1 on any difference.

Run by tests/train/export/onnx_test.cpp with the project's virtual environment (make deps).
"""
import argparse
import csv
import gzip
import json
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort

TOLERANCE = 1e-5


def read_idx_images(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    magic, n, h, w = np.frombuffer(data[:16], dtype=">u4")
    assert magic == 0x803, f"{path}: not an IDX image file"
    return np.frombuffer(data[16:], dtype=np.uint8).reshape(n, h, w)


def softmax(z):
    z = z.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--idx", required=True)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--channels", type=int, default=1)
    a = ap.parse_args()

    model = onnx.load(a.model)
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    class_names = json.loads(meta["class_names"])

    # cutrain predict --csv: path, label, predicted, then one probability per class
    with open(a.predictions, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    assert header[3:] == class_names, f"class names: CSV {header[3:]}, ONNX {class_names}"
    index = [int(re.search(r"(\d+)\.\w+$", os.path.basename(r[0])).group(1)) for r in rows]
    want = np.array([[float(v) for v in r[3:]] for r in rows])

    images = read_idx_images(a.idx)[index]  # (n,H,W)
    x = np.repeat(images[..., None], a.channels, axis=3)  # NHWC
    sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    if inp.type == "tensor(float)":
        x = x.astype(np.float32) / np.float32(255)  # pixels/255, rounded as cutrain does
    got = sess.run(None, {inp.name: x})[0]
    probs = got.astype(np.float64) if out.name == "probabilities" else softmax(got)

    one = sess.run(None, {inp.name: x[:1]})[0]
    one = one.astype(np.float64) if out.name == "probabilities" else softmax(one)
    assert np.abs(one[0] - probs[0]).max() <= 1e-6, "one image differs from the batch"

    top1_onnx, top1_cutrain = probs.argmax(axis=1), want.argmax(axis=1)
    predicted = np.array([class_names.index(r[2]) for r in rows])
    assert (predicted == top1_cutrain).all(), "the CSV's predicted column is not its top-1"
    same = int((top1_onnx == top1_cutrain).sum())
    diff = np.abs(probs - want)
    worst = np.unravel_index(diff.argmax(), diff.shape)
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}: {len(rows)} images, "
          f"input {inp.name} {inp.type} {inp.shape}, output {out.name} {out.shape}")
    print(f"top-1 identical for {same} of {len(rows)} images; largest probability difference "
          f"{diff.max():.3g} (image {rows[worst[0]][0]}, class {class_names[worst[1]]}); "
          f"tolerance {TOLERANCE:g}")
    ok = same == len(rows) and diff.max() <= TOLERANCE
    print("ONNX AGREES" if ok else "ONNX DIFFERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
