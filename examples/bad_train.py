"""A torchrun-style DDP/FSDP training script with silent bugs, one per rule (TPF001-TPF018).

The model inspects product photos: a shared CNN backbone with a product-category head
(cross-entropy) and a binary "defective" head (weighted binary cross-entropy), trained with
AMP and gradient accumulation between a warm-up of the heads and a re-fit of the defect head.

Launch: `torchrun --nproc_per_node=4 examples/bad_train.py --epochs 10`.
Each buggy line ends with `# expect: TPFnnn`; `good_train.py` is the same script, fixed.
Run `flake8 --select TPF examples/bad_train.py` (or `tpf check examples/`) to see them.
"""
import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

NUM_CATEGORIES = 10
DEFECT_RATE = 0.08


class InspectionNet(nn.Module):
    def __init__(self, num_categories: int = NUM_CATEGORIES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, num_categories))
        self.defect_head = nn.Linear(128, 1)

    def forward(self, x):
        h = self.features(x).flatten(1)
        return self.head(h), self.defect_head(h).squeeze(1)


def make_datasets(num_images: int = 6000, val_fraction: float = 0.1):
    """Stand-in for the photo archive: images, category labels and defect flags."""
    images = torch.randn(num_images, 3, 64, 64)
    categories = torch.randint(0, NUM_CATEGORIES, (num_images,))
    defective = (torch.rand(num_images) < DEFECT_RATE).float()
    order = np.random.permutation(num_images)  # expect: TPF011
    n_val = int(num_images * val_fraction)
    full = TensorDataset(images, categories, defective)
    return Subset(full, order[n_val:].tolist()), Subset(full, order[:n_val].tolist())


def make_loaders(train_set, val_set, batch_size: int):
    train_sampler = DistributedSampler(train_set)  # expect: TPF009
    train_loader = DataLoader(train_set, batch_size=batch_size, sampler=train_sampler,
                              num_workers=4, pin_memory=True, drop_last=True)
    warmup_set = Subset(train_set, range(1024))
    warmup_loader = DataLoader(warmup_set, batch_size=batch_size, shuffle=True,  # expect: TPF008
                               num_workers=4, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=256, num_workers=4, pin_memory=True)
    return train_loader, warmup_loader, val_loader


def evaluate(model: nn.Module, val_loader, device):
    model.eval()
    correct = defects_found = defects_total = 0
    for x, y, defective in val_loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        defective = defective.to(device, non_blocking=True)
        logits, defect_logit = model(x)  # expect: TPF002
        correct += (logits.argmax(dim=1) == y).sum().item()
        defects_found += ((defect_logit > 0) & (defective > 0.5)).sum().item()
        defects_total += (defective > 0.5).sum().item()
    return correct / len(val_loader.dataset), defects_found / max(defects_total, 1)


def warmup_heads(model, warmup_loader, device):
    """Fit the freshly initialised heads for one pass before training the whole network."""
    heads = [*model.module.head.parameters(), *model.module.defect_head.parameters()]
    head_opt = torch.optim.Adam(heads, lr=1e-3)
    for x, y, defective in warmup_loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        defective = defective.to(device, non_blocking=True)
        logits, defect_logit = model(x)
        loss = F.cross_entropy(logits, y) + F.binary_cross_entropy_with_logits(
            defect_logit, defective)
        loss.backward()  # expect: TPF003
        head_opt.step()


def train(args):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    torch.manual_seed(args.seed)

    train_set, val_set = make_datasets()
    train_loader, warmup_loader, val_loader = make_loaders(train_set, val_set, args.batch_size)
    model = InspectionNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # expect: TPF017
    model = FSDP(model, device_id=local_rank) if args.fsdp else DDP(model, device_ids=[local_rank])
    warmup_heads(model, warmup_loader, device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    pos_weight = torch.tensor([(1 - DEFECT_RATE) / DEFECT_RATE])
    model.train()
    for epoch in range(args.epochs):
        scaler = torch.amp.GradScaler("cuda")  # expect: TPF012
        epoch_loss = torch.zeros((), device=device)
        class_correct = [0] * NUM_CATEGORIES
        optimizer.zero_grad(set_to_none=True)
        for step, (x, y, defective) in enumerate(train_loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            defective = defective.to(device, non_blocking=True)
            weight = pos_weight.to(device)  # expect: TPF013
            with torch.autocast("cuda", dtype=torch.float16):
                logits, defect_logit = model(x)
                probs = logits.softmax(dim=1)
                defect_prob = torch.sigmoid(defect_logit)
                cls_loss = criterion(probs, y)  # expect: TPF005
                defect_loss = F.binary_cross_entropy_with_logits(  # expect: TPF006
                    defect_prob, defective, pos_weight=weight)
                loss = cls_loss + args.defect_weight * defect_loss
            scaler.scale(loss).backward()  # expect: TPF004
            if (step + 1) % args.accum_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            epoch_loss += loss  # expect: TPF001
            preds = probs.argmax(dim=1)
            for c in range(NUM_CATEGORIES):
                class_correct[c] += (preds[y == c] == c).sum().item()  # expect: TPF010
        accuracy, defect_recall = evaluate(model, val_loader, device)  # expect: TPF007
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {epoch_loss.item() / len(train_loader):.4f}, "
                  f"val acc {accuracy:.3f}, defect recall {defect_recall:.3f}, "
                  f"train hits per class {class_correct}")
    rebalance_defect_head(model, train_set, device)
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), args.out)
    dist.destroy_process_group()


def rebalance_defect_head(model, train_set, device, accum_steps: int = 4):
    """Re-fit the defect head on this rank's shard of the photos: AMP, 4 micro-batches a step."""
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = Subset(train_set, range(rank, len(train_set), world))
    loader = DataLoader(shard, batch_size=32, num_workers=4, pin_memory=True)  # expect: TPF018
    defect_opt = torch.optim.SGD(model.module.defect_head.parameters(), lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    model.train  # expect: TPF016
    for i, (x, _, defective) in enumerate(loader):
        x, defective = x.to(device, non_blocking=True), defective.to(device, non_blocking=True)
        defect_opt.zero_grad(set_to_none=True)  # expect: TPF015
        with torch.autocast("cuda", dtype=torch.float16):
            _, defect_logit = model(x)
            loss = F.binary_cross_entropy_with_logits(defect_logit, defective) / accum_steps
        scaler.scale(loss).backward()
        if (i + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.module.defect_head.parameters(), 1.0)  # expect: TPF014
            scaler.step(defect_opt)
            scaler.update()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--defect-weight", type=float, default=0.5)
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP instead of DDP")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="inspection_net.pt")
    train(parser.parse_args())
