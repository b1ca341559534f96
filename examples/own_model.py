"""Your own model on V-PROM: train it on `vprom.data.VPROM`, predict, score with `vprom score`.

    python examples/own_model.py build/dataset.h5 build/crops-80.h5 --out mymodel/
    python examples/own_model.py build/dataset.h5 build/feats/resnet101.h5 --out mymodel/

SOURCE is a crop store (`vprom crops`: pixels) or a FEATS.h5 (pooled features). The model is
deliberately small: each panel is embedded (a tiny CNN for pixels, a linear layer for
features), and each candidate is scored against the context rows by an MLP.
"""

import argparse
import csv
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from vprom.data import VPROM


class RowScorer(nn.Module):
    """panels [B, 16, ...] -> scores [B, 8]: candidate vs. the mean of rows 1-2 and row 3."""

    def __init__(self, panel_shape, width=64):
        super().__init__()
        if len(panel_shape) == 3:  # pixels [3, S, S]
            self.embed = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(),
                                       nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, width))
        else:  # a feature vector [D]
            self.embed = nn.Linear(panel_shape[0], width)
        self.score = nn.Sequential(nn.Linear(3 * width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, panels):
        b = panels.shape[0]
        x = self.embed(panels.flatten(0, 1)).view(b, 16, -1)
        rows, third = x[:, :6].mean(1), x[:, 6:8].mean(1)
        context = torch.cat([rows, third], 1).unsqueeze(1).expand(-1, 8, -1)
        return self.score(torch.cat([context, x[:, 8:]], 2)).squeeze(2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset"), p.add_argument("source"), p.add_argument("--out", required=True)
    p.add_argument("--split", default="neutral"), p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    scale = lambda x: x.float() / 255  # noqa: E731 - pixels to [0, 1]; features pass as is
    data = {part: VPROM(args.dataset, args.split, part, source=args.source, transform=scale,
                        shuffle_candidates=part == "train", swap_rows=part == "train")
            for part in ("train", "test")}
    model = RowScorer(data["train"][0]["panels"].shape[1:])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        data["train"].set_epoch(epoch)
        for batch in data["train"].loader(32, shuffle=True, num_workers=2):
            loss = nn.functional.cross_entropy(model(batch["panels"].float()), batch["answer"])
            optimizer.zero_grad(), loss.backward(), optimizer.step()
        print(f"epoch {epoch + 1}: last batch loss {loss.item():.3f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), open(out / "predictions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["matrix_id", "choice"] + [f"score_{k}" for k in range(8)])
        for batch in data["test"].loader(64, num_workers=2):
            scores = model(batch["panels"].float())
            for mid, row in zip(batch["id"].tolist(), scores.tolist()):
                writer.writerow([mid, max(range(8), key=row.__getitem__)] + row)
    subprocess.run([sys.executable, "-m", "vprom", "score", args.dataset,
                    str(out / "predictions.csv"), "--split", args.split,
                    "--model", "row-scorer"], check=True)


if __name__ == "__main__":
    main()
