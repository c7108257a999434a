"""Neural-network layers (see issue: nn, optimizers, checkpoints)."""
