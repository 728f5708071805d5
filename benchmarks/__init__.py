"""Benchmarks: the ``vlbatch bench`` harness (``harness``), and standalone scripts beside it.

Each ``benchmarks/<script>.py`` runs as ``python benchmarks/<script>.py`` and prints its figures;
``scenes`` draws the generated photos the harness and the demo share. This package sits below ``cli``
(``vlbatch bench`` and ``vlbatch demo`` import it) and above every other package, which it may import;
nothing but ``cli`` imports it.
"""
