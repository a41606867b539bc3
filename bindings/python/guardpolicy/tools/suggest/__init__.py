"""``python -m guardpolicy suggest`` and ``gp.suggest``: a policy written for the user's model
from its mutation audit (``command``), rendered as ``.gpol`` text (``render``), its command
line and report (``cli``), and the guards a recorded run changed (``from_run``)."""

from .cli import main, report  # noqa: F401
from .command import suggest  # noqa: F401
