"""Closed-form models of the kernel's L2 traffic and misses (``traffic``: sector accesses and
cold misses; ``wave``: the wave model of non-compulsory misses and the C_eff fit) and of where a
miss costs time (``timemodel``)."""
