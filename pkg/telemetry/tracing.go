package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"
)

// Environment variables read by Setup beyond those the OpenTelemetry SDK and
// the OTLP exporter read themselves (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
// OTEL_EXPORTER_OTLP_* endpoint, headers, TLS, timeout, compression).
const (
	envTracesExporter      = "OTEL_TRACES_EXPORTER"
	envEndpoint            = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint      = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol            = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol      = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	exporterOTLP           = "otlp"
	exporterNone           = "none"
	protocolGRPC           = "grpc"
	supportedExportersHelp = `"otlp" or "none"`
)

// Setup installs the global TracerProvider and the global propagator (W3C
// TraceContext and Baggage) for a service, and returns a shutdown function
// that flushes pending spans; call it before the process exits.
//
// The exporter follows the OpenTelemetry environment conventions, limited
// to what sluice ships: OTEL_TRACES_EXPORTER may be "otlp" or "none", and
// OTLP is spoken over gRPC only. When OTEL_TRACES_EXPORTER is unset, spans
// are exported only if an OTLP endpoint is configured; otherwise tracing is
// a no-op that still propagates incoming trace context to outgoing calls,
// so a trace started upstream is not broken by an untraced service.
//
// serviceName and version describe the resource; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override them.
func Setup(ctx context.Context, serviceName, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{},
	))

	export, err := exportEnabled(os.Getenv)
	if err != nil {
		return nil, err
	}
	if !export {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}

	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version)),
		// Later options win: the environment overrides the built-in names.
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("build telemetry resource: %w", err)
	}
	// The exporter connects lazily, so an unreachable collector never blocks
	// start-up; it reads endpoint, headers and TLS settings from the env.
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("create OTLP trace exporter: %w", err)
	}
	// No sampler option: the SDK then honours OTEL_TRACES_SAMPLER, and
	// defaults to parentbased_always_on.
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("shut down tracer provider: %w", err)
		}
		return nil
	}, nil
}

// exportEnabled decides from the environment whether spans are exported,
// rejecting settings sluice cannot honour rather than ignoring them.
func exportEnabled(getenv func(string) string) (bool, error) {
	var export bool
	switch v := strings.TrimSpace(getenv(envTracesExporter)); v {
	case exporterNone:
		return false, nil
	case exporterOTLP:
		export = true
	case "":
		export = getenv(envEndpoint) != "" || getenv(envTracesEndpoint) != ""
	default:
		return false, fmt.Errorf("%s=%q is not supported: must be %s", envTracesExporter, v, supportedExportersHelp)
	}
	if !export {
		return false, nil
	}
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if p := getenv(name); p != "" {
			if p != protocolGRPC {
				return false, fmt.Errorf("%s=%q is not supported: sluice exports OTLP over %q only", name, p, protocolGRPC)
			}
			break // the signal-specific variable wins over the generic one
		}
	}
	return true, nil
}
