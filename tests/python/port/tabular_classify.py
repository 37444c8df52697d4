"""A classifier on tabular data, written as PyTorch tutorials and Kaggle notebooks write one: NumPy features
standardised into tensors, TensorDataset, random_split with a seeded Generator, DataLoader with shuffling,
an MLP in nn.Sequential, CrossEntropyLoss, SGD with momentum, StepLR, and an evaluation loop under no_grad.

    python3 tabular_classify.py --steps 20 [--save-init init.pt | --init-from init.pt] [--out ckpt.pt]
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def make_dataset(n_samples=1200, n_features=16, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 2.0, size=(n_classes, n_features))
    labels = rng.integers(0, n_classes, size=n_samples)
    features = centers[labels] + rng.normal(0.0, 1.5, size=(n_samples, n_features))
    return features.astype(np.float32), labels.astype(np.int64)


class MLP(nn.Module):
    def __init__(self, in_features, hidden, n_classes, p_drop=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Dropout(p_drop),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def evaluate(model, loader, criterion):
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for xb, yb in loader:
            logits = model(xb)
            loss_sum += criterion(logits, yb).item() * yb.size(0)
            correct += (logits.argmax(dim=1) == yb).sum().item()
            total += yb.size(0)
    model.train()
    return loss_sum / total, correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--save-init", default=None)
    parser.add_argument("--init-from", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    X, y = make_dataset()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    dataset = TensorDataset(torch.tensor(X, dtype=torch.float32), torch.tensor(y))
    n_val = len(dataset) // 5
    train_set, val_set = random_split(dataset, [len(dataset) - n_val, n_val],
                                      generator=torch.Generator().manual_seed(args.seed))
    g = torch.Generator()
    g.manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=g, drop_last=True,
                              num_workers=args.workers, pin_memory=torch.cuda.is_available())
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False)

    model = MLP(X.shape[1], args.hidden, int(y.max()) + 1)
    if args.init_from:
        model.load_state_dict(torch.load(args.init_from, weights_only=True))
    if args.save_init:
        torch.save(model.state_dict(), args.save_init)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    step, rows = 0, 0
    start = time.perf_counter()
    epoch = 0
    while step < args.steps:
        for xb, yb in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(xb), yb)
            loss.backward()
            optimizer.step()
            rows += xb.size(0)
            print(f"step {step}: loss {loss.item():.8e} epoch {epoch} lr {scheduler.get_last_lr()[0]:.4e}")
            step += 1
            if step == args.steps:
                break
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader, criterion)
        print(f"epoch {epoch}: val_loss {val_loss:.6f} val_acc {val_acc:.4f}")
        epoch += 1
    elapsed = time.perf_counter() - start
    print(f"tokens/s {rows / elapsed:.1f}")

    if args.out:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "epoch": epoch}, args.out)


if __name__ == "__main__":
    main()
