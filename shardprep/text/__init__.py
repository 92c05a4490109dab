"""Text for BERT pre-training, as google-research/bert's create_pretraining_data.py makes it.

``vocab``: the WordPiece vocabulary and tokenizer (HF ``tokenizers``); ``documents``: BERT's text
layout (one sentence per line, a blank line between documents); ``pretraining``: the instances
(next-sentence pairs, masked LM) as rows for shardprep's Example encoder. Deterministic whatever
the order documents are processed in, and one document in memory at a time.
"""
