"""The pieces the tools share, below every command (none of them imports a command):
``timing/`` (one ``Variant``, one interleaved timing loop, its statistics, the machine
description), ``recording`` (what a filter decided), ``snapshot`` (capture's rows),
``compare`` (outputs against eager's), ``models`` (the demo models), ``model_spec``
(``--model``), ``progress`` (bars and lines on stderr), ``interrupt`` (Ctrl-C) and
``extras`` (what to install when an optional dependency is missing).
"""
