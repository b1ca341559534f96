"""RAVEN's `dataset` class (WellyZhang/RAVEN, src/model/utility/dataset_utility.py), re-stated:
RAVEN is GPL-3.0 and vprom MIT, so its code is not copied here. Kept runnable by Python 2.7,
RAVEN's own Python: `python2.7 raven_loader.py ROOT` prints one JSON line per problem.

Its contract: `glob(join(root_dir, "*", "*.npz"))` kept where `dataset_type in f` (the whole
path); `np.load(join(root_dir, "embedding.npy"), allow_pickle=True)`; per file `np.load(path)`,
`image` reshaped to (16, 160, 160), `target`, `structure`, `meta_target`, `meta_structure`;
each panel `scipy.misc.imresize`d to img_size; every `structure` element but "/" looked up with
`embeddings.item().get(element)` into row k of a (6, 300) float embedding; `indicator` is 1
when 6 were found; `ToTensor` makes float32 tensors of the image and both meta vectors.
"""

import glob
import json
import os
import sys

import numpy as np

if sys.version_info[0] < 3:  # noqa: UP036 (this file runs on Python 2.7 too)
    from scipy.misc import imresize  # what RAVEN calls (scipy < 1.3)
else:
    from PIL import Image

    def imresize(panel, size):
        """imresize on a uint8 panel: PIL's bilinear resize of it unscaled."""
        return np.asarray(Image.fromarray(panel).resize(size[::-1], Image.BILINEAR))


def raven_items(root_dir, dataset_type, img_size=224):
    """(path, image, target, meta_target, meta_structure, embedding, indicator) per problem."""
    file_names = [f for f in glob.glob(os.path.join(root_dir, "*", "*.npz"))
                  if dataset_type in f]
    embeddings = np.load(os.path.join(root_dir, "embedding.npy"), allow_pickle=True)
    for path in sorted(file_names):
        data = np.load(path)
        image = data["image"].reshape(16, 160, 160)
        resized = np.stack([imresize(image[i, :, :], (img_size, img_size)) for i in range(16)])
        embedding = np.zeros((6, 300), dtype=np.float32)
        k = 0
        for element in data["structure"]:
            if element != "/":
                embedding[k, :] = embeddings.item().get(element)  # None (unknown) fails
                k += 1
        indicator = np.array([1.0 if k == 6 else 0.0], dtype=np.float32)
        yield (path, resized.astype(np.float32), int(data["target"]),
               data["meta_target"].astype(np.float32),
               data["meta_structure"].astype(np.float32), embedding, indicator)


def summary(item):
    """What both Pythons must agree on, as JSON."""
    path, image, target, meta_target, meta_structure, embedding, indicator = item
    return {"file": os.path.basename(path), "image": list(image.shape),
            "image_sum": float(image.astype(np.float64).sum()), "target": target,
            "meta_target": meta_target.tolist(), "meta_structure": meta_structure.tolist(),
            "embedding": embedding.sum(axis=1).tolist(), "indicator": indicator.tolist()}


if __name__ == "__main__":
    for part in ("train", "val", "test"):
        for item in raven_items(sys.argv[1], part, int(sys.argv[2])):
            print(json.dumps(dict(summary(item), part=part), sort_keys=True))
