"""The merge decision's library core (issue 14): statistics and search, no pytest, no lab.

- :mod:`.compare`  -- candidate vs parent verdict on one figure from interleaved trials
  (paired bootstrap interval of the ratio of means, +-5 % practical equivalence);
- :mod:`.sequential` -- the same verdict pair by pair until the interval decides against
  +-2.5 % or the budget ends (issue 41; Bonferroni over the declared looks);
- :mod:`.search`   -- NDR/PDR search over offered load in the spirit of MLRsearch;
- :mod:`.latency`  -- min/median/p99 latency at fractions of PDR from timestamped probes;
- :mod:`.plot`     -- PNG plots of the three for the page and Allure;
- :mod:`.simulate` -- seeded simulated trials and devices the tests and the bench share;
- :mod:`.bench`    -- ``python -m ipsec_hil.lab.decision.bench``: trial costs and hit rates.

See README.md beside this file for the rules in prose.
"""
