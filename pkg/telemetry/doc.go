// Package telemetry sets up what every sluice process needs to be observed:
// OpenTelemetry tracing configured from the standard OTEL_* environment, the
// W3C trace-context propagator that carries traces across services, and a
// structured logr logger backed by log/slog.
package telemetry
