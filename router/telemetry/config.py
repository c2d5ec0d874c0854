"""``telemetry:`` in a node's config: :class:`TelemetryConfig`, declared with the other keys in
router.config.telemetry (the config layer sits below the telemetry service)."""

from router.config.telemetry import TelemetryConfig

__all__ = ["TelemetryConfig"]
