"""Generated training modules for the benchmark: realistic shapes, any size."""
from __future__ import annotations

import textwrap

HEADER = '''\
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler
'''

BLOCK = '''

class Block{i}(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.fc1(self.norm(x))
        h = F.gelu(h)
        return x + self.drop(self.fc2(h))


def build_loader_{i}(dataset, batch_size, rank, world):
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=4,
                      pin_memory=True)


def train_epoch_{i}(model, loader, optimizer, scaler, device, accum=4, log_every=50):
    model.train()
    running = torch.zeros((), device=device)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits, y) / accum
        scaler.scale(loss).backward()
        running += loss.detach()
        if (step + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0:
            print(f"step {{step}} loss {{running.item() / (step + 1):.4f}}")
    return running.item()


@torch.no_grad()
def evaluate_{i}(model, val_loader, device):
    model.eval()
    correct = total = 0
    for x, y in val_loader:
        x, y = x.to(device), y.to(device)
        pred = model(x).argmax(dim=-1)
        correct += (pred == y).sum().item()
        total += y.numel()
    return correct / max(total, 1)
'''

MAIN = '''

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    device = torch.device("cuda")
    model = Block0(256, 1024).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.cuda.amp.GradScaler()
    loader = build_loader_0(dataset, 64, 0, 1)
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        train_epoch_0(model, loader, optimizer, scaler, device)
        evaluate_0(model, loader, device)


if __name__ == "__main__":
    main()
'''


def training_module(lines: int) -> str:
    """A module of about `lines` lines made of model, loader, train and eval functions."""
    parts = [HEADER]
    i = 0
    while sum(p.count("\n") for p in parts) + MAIN.count("\n") < lines:
        parts.append(BLOCK.format(i=i))
        i += 1
    parts.append(MAIN)
    return "".join(parts)


def long_function(lines: int) -> str:
    """One function of about `lines` lines: many loops with forward/backward/step."""
    body = []
    i = 0
    chunk = textwrap.dedent('''\
        for step_{i}, (x, y) in enumerate(loader):
            x = x.to(device)
            out_{i} = model(x)
            loss_{i} = criterion(out_{i}, y)
            optimizer.zero_grad()
            loss_{i}.backward()
            optimizer.step()
            history.append(loss_{i}.item())
            if step_{i} % 100 == 0:
                print(step_{i}, loss_{i}.item())
        ''')
    while len(body) < lines:
        body.extend(chunk.format(i=i).splitlines())
        i += 1
    return HEADER + "\n\ndef run(model, loader, optimizer, criterion, device):\n    history = []\n" + \
        textwrap.indent("\n".join(body), "    ") + "\n    return history\n"
