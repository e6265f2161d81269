"""Suite-wide settings.

Hypothesis's default 200 ms deadline per example makes a property test a timed test: on a loaded
two-core machine one slow example fails it although nothing is wrong. Timing belongs in bench/, so
property tests here check properties only.
"""

from hypothesis import settings

settings.register_profile("strom", deadline=None)
settings.load_profile("strom")
