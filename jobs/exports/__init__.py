"""The results' exports: one writer per format, used by the API's routes and by the CLI alike.

Every writer takes pages of ``vlbatch.db.results.ResultRecord`` (as ``vlbatch.db.results.iter_results`` reads them,
one page at a time), or, for JSONL and Parquet, pages of the rows records are made from (``jsonl.jsonl_rows``,
``parquet.rows_batch``), and hands its bytes on a page at a time, so an export of any size holds one page in memory,
whether it streams over HTTP or goes to a file:

- ``jsonl``: one JSON object per line, the fields of the API's ``ResultOut``;
- ``csv_writer``: one row per item, tags joined by ``;``, the caption and the answer's JSON in columns of their own;
- ``parquet``: typed columns, one row group per page, ``tags`` a list of strings with ``tag_sources`` beside it;
- ``xmp``: a tagging job's tags and captions as XMP sidecars beside the photos (``xmp_packet`` builds the packet);
- ``batch_output``: an OpenAI batch's output and error lines (the jobs service's files, ``vlbatch run-batch``'s);
- ``document_json``: a document's answer as a JSON file in its job's ``output_dir`` (the worker writes it);
- ``files``: a job's export read from the database (``JobExport``: the API's routes) and a job's results to a file,
  the format chosen by its suffix (``vlbatch tag --out``). JSONL and Parquet are written from pages of rows a column
  at a time (``jsonl.jsonl_rows``, ``parquet.rows_batch``), the record writers' bytes.

The columns every job has are in ``columns``; a pipeline adds its own through ``Pipeline.flat_columns``.

May import the core (``vlbatch.db``, ``vlbatch.errors``), ``pipelines`` (for the flat columns) and pyarrow (lazily);
never ``api``, ``worker`` or the commands.
"""
