"""``vlbatch eval``: answer quality of a deployment on a labelled set, and agreement between two.

``labels`` reads the labelled set (``library`` makes it of a photo library's own keywords, for
``--labels-from xmp``), ``metrics`` scores result rows against it and compares two runs
(pure functions), ``report`` writes the Markdown summary, ``run`` sends the set through the normal
embedded job path.
"""
