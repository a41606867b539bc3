"""What a policy is, without torch: load and lint a ``.gpol`` file (``loading``), the
``Policy`` object and its explanations (``policy``), the filter and plugin registry
(``registry``), the errors (``errors``), the installed data (``data``), safe file writes
(``files``) and the ``code`` field of an entry (``entry_code``).

The bottom layer of the package: it imports only ``guardpolicy._core``.
"""
