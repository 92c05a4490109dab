"""The CSV format: ``source`` (the ``Format``: header, cuts, the per-record reader, the
reference), ``arrow`` (the column-wise fast path, pyarrow), ``wide`` (the column-wise path of
tables too wide for pyarrow's reader) and ``dialect`` (delimiter, header, names, null values).
The package imports none of them; ``formats.files`` registers ``source.CsvFormat``.
"""
