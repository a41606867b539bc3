"""guardpolicy's tools, apart from the runtime package: ``capture`` (record the guards a
model's compiles offer), ``bench`` (per-call latency under every filter), ``audit``
(soundness under state changes), ``latency`` (``gp.compile`` against the torch way),
``demo`` (what ``make demo`` runs) and the others of ``python -m guardpolicy``; ``common``
holds what they share (``timing``, the one timing engine and machine description ``bench``
and ``latency`` share; ``models``, the demo models; ...) and imports none of them. Each needs
torch; run them as ``python -m guardpolicy SUBCOMMAND``. Nothing in the runtime package
imports them.
"""
