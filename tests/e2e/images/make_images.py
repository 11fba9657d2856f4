"""Image folders and what torchvision and the real PyTorch loop make of them (tests/test_images.cpp).

Writes under OUT:
  tree-clean/  an ImageFolder tree of every kind of file ImageFolder lists and batchcheck
               decodes (JPEG baseline, progressive, grey, CMYK; PNG RGB, RGBA, palette, 1-bit,
               16-bit grey; WebP lossy and lossless with alpha; PPM, PGM), nested folders,
               upper-case extensions, files ImageFolder skips
  tree-corrupt/ the same tree plus a truncated JPEG and a text file named .png
  <case>/config.json  one scan per case; model.pt the model every case trains
and manifest.json: per case, torchvision's samples (path, class) and which batches the real
training loop raises at, and why; <case>-pixels.npy, PIL's pixels after Resize/CenterCrop; and
<case>-floats/, a model that holds torchvision's float tensors and returns NaN unless its batch
(the whole dataset) matches them.

    python make_images.py OUT
"""
import io
import json
import os
import shutil
import sys
import warnings

import numpy as np
import torch
from PIL import Image, features
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 4


def picture(w, h, seed):
    """Smooth gradients plus noise: resampling has something to average."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) * 127 / max(w + h - 2, 1)], -1)
    return np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)


def write_tree(root):
    """Every file kind, in three classes; returns nothing (torchvision lists it)."""
    os.makedirs(root)
    for c in ["cat", "dog", "zebra", "dog/Extra", "dog/extra-b"]:
        os.makedirs(os.path.join(root, c))
    p = lambda *parts: os.path.join(root, *parts)  # noqa: E731
    Image.fromarray(picture(40, 30, 1)).save(p("cat", "a.jpg"), quality=90)
    Image.fromarray(picture(33, 57, 2)).save(p("cat", "b.JPG"), quality=75, progressive=True)
    Image.fromarray(picture(64, 48, 3)).convert("L").save(p("cat", "c.jpeg"))
    Image.fromarray(picture(50, 20, 4)).convert("CMYK").save(p("cat", "d.jpg"))
    Image.fromarray(picture(37, 41, 5)).save(p("dog", "a.png"))
    rgba = np.dstack([picture(45, 45, 6), picture(45, 45, 7)[..., 0]])
    Image.fromarray(rgba, "RGBA").save(p("dog", "b.png"))
    Image.fromarray(picture(60, 36, 8)).convert("P", palette=Image.ADAPTIVE, colors=16).save(p("dog", "c.png"))
    Image.fromarray(picture(32, 32, 9)).convert("1").save(p("dog", "Extra", "d.png"))
    grey16 = (picture(35, 35, 10)[..., 0].astype(np.uint16) * 3)  # above 255: PIL clips
    Image.fromarray(grey16).save(p("dog", "extra-b", "e.png"))
    Image.fromarray(picture(52, 39, 11)).save(p("zebra", "a.ppm"))
    Image.fromarray(picture(39, 52, 12)).convert("L").save(p("zebra", "b.pgm"))
    if features.check("webp"):
        Image.fromarray(picture(48, 40, 13)).save(p("zebra", "c.webp"), quality=80)
        Image.fromarray(rgba, "RGBA").save(p("zebra", "d.webp"), lossless=True)
    Image.fromarray(picture(30, 30, 14)).save(p("zebra", "e.jpg"))
    with open(p("zebra", "notes.txt"), "w") as f:  # not an image extension: not listed
        f.write("labels checked 2026-11-30\n")
    Image.fromarray(picture(30, 30, 15)).save(p("top-level.jpg"))  # not in a class folder


def write_extra_tree(root):
    """Files PIL reads that are easy to get wrong: a palette PNG with transparency (libpng
    expands it to RGBA), a PNG missing its end chunk, a grey+alpha PNG."""
    os.makedirs(os.path.join(root, "a"))
    pal = Image.fromarray(picture(30, 20, 21)).convert("P", palette=Image.ADAPTIVE, colors=8)
    pal.save(os.path.join(root, "a", "palette-transparent.png"), transparency=0)
    whole = io.BytesIO()
    Image.fromarray(picture(25, 25, 22)).save(whole, "PNG")
    with open(os.path.join(root, "a", "no-end-chunk.png"), "wb") as f:
        f.write(whole.getvalue()[:-12])  # IEND is the last 12 bytes
    grey_alpha = np.dstack([picture(20, 30, 23)[..., 0], picture(20, 30, 24)[..., 1]])
    Image.fromarray(grey_alpha, "LA").save(os.path.join(root, "a", "grey-alpha.png"))


CASES = {
    # name: (tree, transform, transform config)
    "crop": ("tree-clean", transforms.Compose([transforms.Resize(36), transforms.CenterCrop(32), transforms.ToTensor(),
                                          transforms.Normalize(MEAN, STD)]),
             {"resize": 36, "center_crop": 32, "normalize": {"mean": MEAN, "std": STD}}),
    "bicubic": ("tree-clean", transforms.Compose([transforms.Resize((24, 40), interpolation=transforms.InterpolationMode.BICUBIC),
                                             transforms.ToTensor()]),
                {"resize": [24, 40], "interpolation": "bicubic"}),
    "pad-crop": ("tree-clean", transforms.Compose([transforms.Resize(20), transforms.CenterCrop([25, 31]), transforms.ToTensor()]),
                 {"resize": 20, "center_crop": [25, 31]}),
    "ragged": ("tree-clean", transforms.Compose([transforms.Resize(32), transforms.ToTensor()]), {"resize": 32}),
    "extra": ("tree-extra", transforms.Compose([transforms.Resize(16), transforms.CenterCrop(16), transforms.ToTensor()]),
              {"resize": 16, "center_crop": 16}),
    "corrupt": ("tree-corrupt", transforms.Compose([transforms.Resize(36), transforms.CenterCrop(32), transforms.ToTensor(),
                                               transforms.Normalize(MEAN, STD)]),
                {"resize": 36, "center_crop": 32, "normalize": {"mean": MEAN, "std": STD}}),
}
# A model with two outputs for the three classes: class index 2 is out of range for it.
FEW_CLASSES = 2


def pillow_vertical_first():
    """Whether this Pillow resamples the height first when it shrinks it much more than the
    width (Pillow 13; every Pillow before it goes horizontal first)."""
    im = Image.fromarray(picture(60, 60, 99))
    both = np.asarray(im.resize((50, 20), Image.BICUBIC))
    v_first = np.asarray(im.resize((60, 20), Image.BICUBIC).resize((50, 20), Image.BICUBIC))
    return bool((both == v_first).all())


class SmallCNN(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


class MatchesExpected(torch.nn.Module):
    """Zero logits when the whole dataset, as one batch, is torchvision's tensors within one
    8-bit level per channel; NaN otherwise (the scan then fails with output-nonfinite)."""

    def __init__(self, expected, tolerance):
        super().__init__()
        self.register_buffer("expected", expected)
        self.register_buffer("tolerance", tolerance)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ok = bool(((x - self.expected).abs() <= self.tolerance).all()) and x.shape == self.expected.shape
        logits = torch.zeros(x.size(0), 3)
        return logits if ok else logits + float("nan")


def exact_check(out, name, ds, tf_config):
    """A case '<name>-floats': the float tensors the scan feeds the model are torchvision's."""
    expected = torch.stack([ds[i][0] for i in range(len(ds))])
    std = torch.tensor(tf_config.get("normalize", {}).get("std", [1.0, 1.0, 1.0])).view(-1, 1, 1)
    tolerance = (1.0 / 255) / std + 1e-6
    folder = os.path.join(out, name + "-floats")
    os.makedirs(folder)
    torch.jit.script(MatchesExpected(expected, tolerance)).save(os.path.join(folder, "model.pt"))
    config = {"model": {"path": "model.pt", "mode": "eval"},
              "data": {"format": "imagefolder", "path": "../tree-clean", "transform": tf_config},
              "loader": {"batch_size": len(ds)},
              "loss": {"type": "cross_entropy"}}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def real_loop(model, loader):
    """Every batch of the training loop (no optimizer step), and what each raises."""
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    failures, b = [], 0
    it = iter(loader)
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            break
        except Exception as e:  # the dataset or the collate_fn raised: the model never sees it
            stage = "collate" if "stack expects" in str(e) else "load"
            failures.append({"batch": b, "stage": stage, "error": str(e).splitlines()[0]})
            b += 1
            continue
        try:
            loss_fn(model(x), y).backward()
        except Exception as e:
            failures.append({"batch": b, "stage": "forward", "error": str(e).splitlines()[0]})
        model.zero_grad()
        b += 1
    return {"batches": b, "failures": failures}


def few_classes(out):
    """The corrupt tree, a model with too few outputs, and a training transform with random
    crops and flips, exported with python/batchcheck_export.py from the user's own objects."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
    from batchcheck_export import export_scan

    tf = transforms.Compose([transforms.RandomResizedCrop(32), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize(MEAN, STD)])
    ds = datasets.ImageFolder(os.path.join(out, "tree-corrupt"), transform=tf)
    model = SmallCNN(FEW_CLASSES)
    loader = DataLoader(ds, batch_size=BATCH)
    case = {"case": "few-classes", "classes": ds.classes}
    case.update(real_loop(model, loader))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_scan(os.path.join(out, "few-classes"), model, loader, loss=torch.nn.CrossEntropyLoss())
    case["export_warnings"] = [str(w.message) for w in caught if "export_scan" in str(w.message)]
    return case


class Plain(torch.utils.data.Dataset):
    """A user's own dataset: images of different sizes, not an ImageFolder."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def exported_sizes(out):
    """Images of different sizes from the user's own Dataset: exported as per-sample tensors
    (they vary in more than their first dimension), failing where default_collate fails."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
    from batchcheck_export import export_scan

    ds = datasets.ImageFolder(os.path.join(out, "tree-clean"), transform=transforms.Compose([transforms.Resize(32), transforms.ToTensor()]))
    plain = Plain([ds[i] for i in range(len(ds))])
    loader = DataLoader(plain, batch_size=BATCH)
    case = {"case": "export-sizes"}
    case.update(real_loop(SmallCNN(3), loader))
    export_scan(os.path.join(out, "export-sizes"), SmallCNN(3), loader, loss=torch.nn.CrossEntropyLoss())
    return case


def main(out):
    torch.manual_seed(0)
    write_tree(os.path.join(out, "tree-clean"))
    write_extra_tree(os.path.join(out, "tree-extra"))
    shutil.copytree(os.path.join(out, "tree-clean"), os.path.join(out, "tree-corrupt"))
    whole = io.BytesIO()
    Image.fromarray(picture(40, 30, 16)).save(whole, "JPEG")
    with open(os.path.join(out, "tree-corrupt", "cat", "b2-truncated.jpg"), "wb") as f:
        f.write(whole.getvalue()[: len(whole.getvalue()) * 2 // 3])
    with open(os.path.join(out, "tree-corrupt", "zebra", "0-not-an-image.png"), "w") as f:
        f.write("<html>404 Not Found</html>\n")

    model = torch.jit.script(SmallCNN(3))
    model.save(os.path.join(out, "model.pt"))
    manifest = {"webp": features.check("webp"), "pillow_vertical_first": pillow_vertical_first(), "cases": []}
    for name, (tree, tf, tf_config) in CASES.items():
        ds = datasets.ImageFolder(os.path.join(out, tree), transform=tf)
        case = {"case": name, "classes": ds.classes,
                "samples": [[os.path.relpath(p, os.path.join(out, tree)), c] for p, c in ds.samples]}
        if name in ("crop", "bicubic", "pad-crop", "extra"):
            # PIL's pixels after Resize/CenterCrop, before ToTensor: what bc_image must give.
            pil_only = transforms.Compose([t for t in tf.transforms if not isinstance(t, (transforms.ToTensor, transforms.Normalize))])
            pixels = np.stack([np.asarray(pil_only(ds.loader(p))) for p, _ in ds.samples])
            np.save(os.path.join(out, name + "-pixels.npy"), pixels)
            if name not in ("bicubic", "extra"):
                exact_check(out, name, ds, tf_config)
        case.update(real_loop(model, DataLoader(ds, batch_size=BATCH)))
        os.makedirs(os.path.join(out, name))
        config = {"model": {"path": "../model.pt"},
                  "data": {"format": "imagefolder", "path": "../" + tree, "transform": tf_config},
                  "loader": {"batch_size": BATCH},
                  "loss": {"type": "cross_entropy"}}
        with open(os.path.join(out, name, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        manifest["cases"].append(case)
    manifest["cases"].append(few_classes(out))
    manifest["cases"].append(exported_sizes(out))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
