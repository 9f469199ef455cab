"""Test-suite settings shared by every test module."""

from hypothesis import HealthCheck, settings

# No per-example deadlines or too-slow health checks: these machines are shared and noisy, and speed goals live in
# benchmarks/, never in unit tests. Example counts stay as each test sets them.
settings.register_profile("tinker-opt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tinker-opt")
