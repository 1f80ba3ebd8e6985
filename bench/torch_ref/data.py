"""cutrain's data path in PyTorch: the image list, decoding, crop/flip, normalisation.

As data/image.h and train/setup/sources.cpp:
  - a list line is "path<TAB>label" or "path label"; '#' comments and blank lines skipped;
    relative paths are relative to the list's folder; --limit-* keeps the first N samples;
  - decode to 1 (luma) or 3 channels, shorter side to `resize` (or `size`) when it differs
    (PIL: BOX when shrinking, the area average cutrain uses; BILINEAR when enlarging), then a
    size x size window: centred for evaluation; with augment, its corner drawn uniformly so it
    may reach `pad` pixels beyond each edge (those read 0), and a left-right flip with p = 1/2;
  - pixels normalised as (p / 255 - mean) / std per channel, on the device, from uint8.
The random draws are not cutrain's (it keys them on seed, epoch and sample); their
distribution is the same.
"""
import os
import random

import numpy as np
import torch
from PIL import Image


def read_list(path, limit=0):
    """[(absolute path, label)] in list order."""
    base = os.path.dirname(os.path.abspath(path))
    samples = []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            p, label = line.rsplit("\t", 1) if "\t" in line else line.split()
            p = p.strip()
            samples.append((p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p)),
                            int(label)))
            if limit and len(samples) == limit:
                break
    return samples


def load_image(path, channels, side):
    """(h, w, channels) uint8, shorter side `side`. A JPEG is decoded at the smallest DCT
    scale (1/2, 1/4, 1/8) that still covers it (PIL's draft mode), as cutrain's decoder does:
    what a tuned DataLoader does too."""
    with Image.open(path) as im:
        mode = "L" if channels == 1 else "RGB"
        w, h = im.size
        if min(w, h) > side:
            im.draft(mode, (max(1, w * side // min(w, h)), max(1, h * side // min(w, h))))
        im = im.convert(mode)
        w, h = im.size
        if min(w, h) != side:
            s = side / min(w, h)
            im = im.resize((max(1, round(w * s)), max(1, round(h * s))),
                           Image.BOX if s < 1 else Image.BILINEAR)
        a = np.asarray(im, dtype=np.uint8)
    return a.reshape(a.shape[0], a.shape[1], channels)


def crop_flip(img, size, pad, augment, rng):
    """A size x size window of (h, w, c) uint8 (see the top of this file)."""
    h, w, c = img.shape
    if not augment:
        y0, x0 = (h - size) // 2, (w - size) // 2
        return img[y0:y0 + size, x0:x0 + size].copy()  # writable, owned
    y0 = rng.randint(-pad, h - size + pad)
    x0 = rng.randint(-pad, w - size + pad)
    out = np.zeros((size, size, c), np.uint8)
    ys, ye = max(0, y0), min(h, y0 + size)
    xs, xe = max(0, x0), min(w, x0 + size)
    out[ys - y0:ye - y0, xs - x0:xe - x0] = img[ys:ye, xs:xe]
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


class ListDataset(torch.utils.data.Dataset):
    """One sample: (size, size, C) uint8 and its label, decoded in a DataLoader worker."""

    def __init__(self, samples, size, channels, resize, augment, pad):
        self.samples, self.size, self.channels = samples, size, channels
        self.side = resize or size
        self.augment, self.pad = augment, pad

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        img = load_image(path, self.channels, self.side)
        return torch.from_numpy(crop_flip(img, self.size, self.pad, self.augment, random)), label


def _decode_square(args):
    path, channels, side = args
    img = load_image(path, channels, side)
    h, w, _ = img.shape
    y0, x0 = (h - side) // 2, (w - side) // 2
    return img[y0:y0 + side, x0:x0 + side]


def decode_all(samples, channels, side, workers):
    """Every image once, as a (N, side, side, C) uint8 tensor (a centred square, like a pack)
    and (N) int64 labels: the resident mode's data set."""
    import multiprocessing
    args = [(p, channels, side) for p, _ in samples]
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            imgs = pool.map(_decode_square, args, chunksize=256)
    else:
        imgs = [_decode_square(a) for a in args]
    return (torch.from_numpy(np.stack(imgs)),
            torch.tensor([label for _, label in samples], dtype=torch.int64))


def gpu_crop_flip(x, size, pad, gen):
    """The augmentation on the device for a batch x (N, S, S, C) uint8: per image a window
    whose corner is uniform in [-pad, S - size + pad]^2 (outside reads 0) and a flip with
    p = 1/2. One gather; no per-image loop."""
    N, S, _, C = x.shape
    dev = x.device
    xp = torch.nn.functional.pad(x, (0, 0, pad, pad, pad, pad))  # (N, S+2p, S+2p, C)
    y0 = torch.randint(0, S - size + 2 * pad + 1, (N,), device=dev, generator=gen)
    x0 = torch.randint(0, S - size + 2 * pad + 1, (N,), device=dev, generator=gen)
    flip = torch.randint(0, 2, (N,), device=dev, generator=gen).bool()
    r = torch.arange(size, device=dev)
    rows = y0[:, None] + r                                         # (N, size)
    cols = x0[:, None] + torch.where(flip[:, None], size - 1 - r, r)  # (N, size)
    n = torch.arange(N, device=dev)[:, None, None]
    return xp[n, rows[:, :, None], cols[:, None, :]]               # (N, size, size, C)


def gpu_centre(x, size):
    N, S, _, C = x.shape
    o = (S - size) // 2
    return x[:, o:o + size, o:o + size]


def normalise(x, mean, std, channels_last):
    """(N, H, W, C) uint8 on the device -> (N, C, H, W) float32 normalised, stored NHWC when
    channels_last (a view: no copy)."""
    y = x.permute(0, 3, 1, 2).float().div_(255)
    y = (y - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
    return y.contiguous(memory_format=torch.channels_last) if channels_last else y.contiguous()


class BytesDataset(torch.utils.data.Dataset):
    """One sample: the file's bytes (uint8) and its label, read in a DataLoader worker; the
    decoding is left to the GPU (gpu_decode)."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with open(path, "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), label


def bytes_collate(batch):
    return [b for b, _ in batch], torch.tensor([label for _, label in batch], dtype=torch.int64)


def gpu_decode(files, channels, side, size, pad, augment, dev, gen):
    """A batch of JPEG files decoded on `dev` by torchvision.io.decode_jpeg (nvJPEG on CUDA),
    each image's shorter side resized to `side` and its centred side x side square kept, all
    on the device; then the size x size window of the rest of this file (random with augment,
    else centred): (N, size, size, C) uint8."""
    import torchvision
    from torchvision.io import ImageReadMode
    from torchvision.transforms.v2 import functional as TF
    mode = ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB
    imgs = torchvision.io.decode_jpeg(files, mode=mode, device=dev)  # [(C, h, w)]
    squares = torch.stack([TF.center_crop(TF.resize(img, side, antialias=True), [side, side])
                           for img in imgs]).permute(0, 2, 3, 1)  # (N, side, side, C)
    return gpu_crop_flip(squares, size, pad, gen) if augment else gpu_centre(squares, size)
