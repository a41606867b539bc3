"""Agreeing across ``torch.distributed`` ranks: the collectives with a deadline
(``collectives``), each rank's policy fingerprint (``fingerprint``), the agreement on the
policy and on each frame's decisions (``agreement``, ``frame_digest``) and on each verified
call's outcome (``verdicts``).

Above ``api``, below ``runtime``: it knows policies, never frames or calls.
"""
