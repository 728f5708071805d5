"""The ``vlbatch`` command: the top layer, which may import every package.

``main`` holds the Typer app and registers one module per command group; ``doctor``, ``demo``,
``remote`` (the client of a running API) and ``evaluation`` (``vlbatch eval``) are what those commands
run; ``docs_pages`` writes the docs site's generated pages (``python -m cli.docs_pages``). ``import cli.main``
stays cheap: each command imports what it runs inside its body, so ``--help`` loads no pipeline, worker, engine or
model library (tests/test_import_rules.py). Nothing else imports
``cli``; of vllm and torch it imports neither itself (the engine and the bench harness do).
"""
