"""Topic questions that several rules ask (epochs, modes, losses, accumulation windows, AMP,
distribution and sharding, data order, devices, seeding, model classes, fix proofs), each
memoised per file and answered from the shared facts, never by walking the tree again."""
