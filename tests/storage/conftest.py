"""Markers of the storage tests."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes more than 20 s on a 2-core machine (deselect with -m 'not slow'); a faster variant "
                   "of the same check always runs")
