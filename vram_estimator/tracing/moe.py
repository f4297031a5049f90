"""Mixture-of-experts layers under fake tensors: which expert a token goes to is data, and a
fake tensor has none, so the library's loop over the experts that were hit (``nonzero``,
``torch.where`` on the routing mask) cannot run.  The layer is given a forward that does what
the library's does, with the same operations and the same saved tensors, for an even routing:
every expert receives ``tokens x top_k / experts`` tokens (the balanced load the router's
auxiliary loss trains towards).  Real routing is uneven; the activation bytes of the experts
sum to the same total either way, only the largest single expert's working set differs.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

# transformers classes whose forward loops over the experts a routing mask hit
SPARSE_MOE_BLOCKS = ("MixtralSparseMoeBlock", "Qwen3MoeSparseMoeBlock", "Qwen2MoeSparseMoeBlock")


def _even_forward(self, hidden_states: torch.Tensor):
    """The sparse MoE forward of transformers 4.x (router softmax in fp32, top-k, per-expert
    gather, expert MLP, weighted ``index_add_``) with ``tokens x top_k / experts`` tokens each."""
    batch, seq, hidden = hidden_states.shape
    flat = hidden_states.view(-1, hidden)
    router_logits = self.gate(flat)
    weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    weights, _chosen = torch.topk(weights, self.top_k, dim=-1)
    if getattr(self, "norm_topk_prob", True):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(flat.dtype)
    final = torch.zeros((batch * seq, hidden), dtype=flat.dtype, device=flat.device)
    tokens = batch * seq
    share = max(1, tokens * self.top_k // self.num_experts)
    for e, expert in enumerate(self.experts):
        top_x = (torch.arange(share, device=flat.device) + e * share) % tokens
        slot = torch.full_like(top_x, e % self.top_k)
        current = flat[None, top_x].reshape(-1, hidden)
        out = expert(current) * weights[top_x, slot, None]
        final.index_add_(0, top_x, out.to(flat.dtype))
    return final.reshape(batch, seq, hidden), router_logits


def even_routing(model: torch.nn.Module) -> int:
    """Give every sparse MoE block of ``model`` the even-routing forward; the number changed."""
    changed = 0
    for module in model.modules():
        if type(module).__name__ in SPARSE_MOE_BLOCKS:
            module.forward = types.MethodType(_even_forward, module)
            changed += 1
    return changed
