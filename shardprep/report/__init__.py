"""``python -m shardprep.report DIR -o report.html``: a data set's one-page HTML report.

``page`` builds the page and is the command (``__main__`` runs it); ``feature_section`` draws the
features section, ``charts`` the inline SVG charts, ``red_flags`` finds what looks wrong (shared
with ``shardprep.inspect``), ``text_run`` a text run's corpus and sequences, ``generation_section`` an
appended data set's generations (shared with ``shardprep.inspect``), and ``html`` holds the
one escape and the table builders. The package imports none of them.
"""
