"""The tiny model's training corpus (corpus: `python -m engine.training.corpus`) and its training
(train: `python -m engine.training`)."""
