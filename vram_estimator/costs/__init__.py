"""The cost model: resolved settings -> the terms each phase keeps on the GPU (weights,
gradients, optimizer states, activations, the runtime's buffers), their interval, the verdict
against a card, and the changes that would make a run fit."""
