"""Isolation: run one test in a clean interpreter and bring every report home.

The pytest process keeps a pool of zygotes (:mod:`.pool`) and a controller
per isolated test (:mod:`.controller`); zygotes (:mod:`.server`) fork test
children (:mod:`.child`) that run pytest's own protocol for one item.
They speak the typed messages of :mod:`.messages` over :mod:`.protocol`'s
framed channels. Nothing here imports torch.
"""
