"""A randomized fault runner (Jepsen style) for a local shoal cluster (DESIGN.md section 10).

- :mod:`chaos.schedule`: a nemesis schedule from a seed (pure; the same seed gives the same schedule);
- :mod:`chaos.history`: what the writers sent, and which writes were acknowledged or are uncertain;
- :mod:`chaos.checker`: pure checks of the final replica contents and the WAL channels' GTIDs;
- :mod:`chaos.nemesis`, :mod:`chaos.workload`, :mod:`chaos.runner`: the live parts (own cluster,
  writers, a WAL observer, the faults);
- ``python -m chaos --seed S --duration 600 --output json`` (with ``tests/faults`` on the path,
  ``make chaos``) runs a long schedule outside pytest.
"""
