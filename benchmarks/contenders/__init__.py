"""The programs a user would run instead of shardprep, each a ``python -m`` entry point of its own."""
