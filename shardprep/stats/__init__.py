"""Feature statistics: what a run counts per split, and their mergeable state.

``feature_stats`` defines the statistics (``FeatureStats``; the per-record reference, the merge,
the manifest's ``"statistics"``); ``columns`` computes the same from a batch's columns (the path
Parse takes; ``number_sums``: its numpy sums of many number columns at once); ``sketches``
(number and count sketches) and ``distinct`` (string counts and their HyperLogLog) are the
mergeable parts; ``state`` writes a split's state beside its shards for a later append. The
package imports none of them.
"""
