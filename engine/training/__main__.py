"""`python -m engine.training`: train the tiny model and its tokenizer (engine/training/train.py)."""

from .train import main

main()
