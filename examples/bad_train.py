"""A small image-classification training script with silent bugs, one per rule.

Each buggy line ends with `# expect: TPFnnn`; `good_train.py` is the same script, fixed.
Run `flake8 --select TPF examples/bad_train.py` (or `tpf check examples/`) to see them.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def make_loaders(batch_size: int):
    train_set = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
    val_set = TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=4,
                              pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=256, num_workers=4, pin_memory=True)
    return train_loader, val_loader


def evaluate(model: nn.Module, val_loader, device) -> float:
    model.eval()
    correct, total = 0, 0
    for x, y in val_loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)  # expect: TPF002
        correct += (logits.argmax(dim=1) == y).sum().item()
        total += y.size(0)
    model.train()
    return correct / total


def warmup_head(model: SmallCNN, train_loader, device, steps: int = 100):
    """Train only the classifier head for a few steps before unfreezing the backbone."""
    head_opt = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(train_loader):
        if step == steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = criterion(model(x), y)
        loss.backward()  # expect: TPF003
        head_opt.step()


def train(args):
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = SmallCNN().to(device)
    train_loader, val_loader = make_loaders(args.batch_size)
    warmup_head(model, train_loader, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        epoch_loss = 0.0
        optimizer.zero_grad(set_to_none=True)
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = criterion(model(x), y)
            loss.backward()  # expect: TPF004
            if (step + 1) % args.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            epoch_loss += loss  # expect: TPF001
        accuracy = evaluate(model, val_loader, device)
        print(f"epoch {epoch}: loss {epoch_loss.item() / len(train_loader):.4f}, "
              f"val acc {accuracy:.3f}")
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="small_cnn.pt")
    train(parser.parse_args())
