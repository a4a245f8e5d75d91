"""The embedded models: training (train.py), tokenizer, evaluation (evaluate.py) and their weights."""
