"""guardpolicy's tools, apart from the runtime package: ``capture`` (record the guards a
model's compiles offer), ``bench`` (per-call latency under every filter), ``audit``
(soundness under state changes), ``latency`` (``gp.compile`` against the torch way),
``timing`` (the one timing engine and machine description ``bench`` and ``latency`` share),
``demo`` (what ``make demo`` runs) and ``_models`` (the demo models). Each needs torch; run
them as ``python -m guardpolicy SUBCOMMAND``. Nothing in the runtime package imports them.
"""
