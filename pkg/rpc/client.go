package rpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Dial creates a client connection to target (for example
// "dns:///admitter.sluice-system:9090"). It connects lazily, on the first
// call. The connection traces calls with OpenTelemetry, logs each finished
// call through log, keeps idle connections alive within the server's
// keepalive policy and balances calls round-robin across every address the
// resolver returns, so a dns:/// target spreads over all replicas.
//
// Defaults that opts, applied after them, may override: plaintext
// transport (pass grpc.WithTransportCredentials for TLS) and no retries
// (pass WithRetries for idempotent methods).
func Dial(target string, log logr.Logger, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	serviceConfig, err := buildServiceConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	logOpts := loggingOptions(logging.DefaultClientCodeToLevel)
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithChainUnaryInterceptor(logging.UnaryClientInterceptor(logrAdapter(log), logOpts...)),
		grpc.WithChainStreamInterceptor(logging.StreamClientInterceptor(logrAdapter(log), logOpts...)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                clientPingInterval,
			Timeout:             clientPingTimeout,
			PermitWithoutStream: true,
		}),
	}
	conn, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// retryOption carries WithRetries' methods to Dial, which turns them into
// the default service config; it does nothing by itself.
type retryOption struct {
	grpc.EmptyDialOption
	fullMethods []string
}

// WithRetries makes Dial retry the named methods when they fail with
// UNAVAILABLE (up to 4 attempts in all, with backoff from 100ms to 1s).
// Name only idempotent methods: a retried call may have run already.
// A name is a full method ("/sluice.checks.v1.AdmissionCheckService/Evaluate",
// as in generated *_FullMethodName constants) or a whole service
// ("/sluice.checks.v1.AdmissionCheckService/"). It takes effect only when
// passed to Dial.
func WithRetries(fullMethods ...string) grpc.DialOption {
	return retryOption{fullMethods: fullMethods}
}

// Retry policy for WithRetries. Only UNAVAILABLE is retried: it is the one
// code that means the call did not reach a handler or the handler asked to
// be retried.
const (
	retryMaxAttempts    = 4
	retryInitialBackoff = 100 * time.Millisecond
	retryMaxBackoff     = time.Second
)

type methodName struct {
	Service string `json:"service"`
	Method  string `json:"method,omitempty"`
}

type retryPolicy struct {
	MaxAttempts          int      `json:"maxAttempts"`
	InitialBackoff       string   `json:"initialBackoff"`
	MaxBackoff           string   `json:"maxBackoff"`
	BackoffMultiplier    float64  `json:"backoffMultiplier"`
	RetryableStatusCodes []string `json:"retryableStatusCodes"`
}

type methodConfig struct {
	Name        []methodName `json:"name"`
	RetryPolicy retryPolicy  `json:"retryPolicy"`
}

type serviceConfig struct {
	LoadBalancingConfig []map[string]struct{} `json:"loadBalancingConfig"`
	MethodConfig        []methodConfig        `json:"methodConfig,omitempty"`
}

// buildServiceConfig returns the default service config JSON: round-robin,
// plus a retry policy for methods named by WithRetries options in opts.
func buildServiceConfig(opts []grpc.DialOption) (string, error) {
	sc := serviceConfig{LoadBalancingConfig: []map[string]struct{}{{"round_robin": {}}}}
	var names []methodName
	for _, o := range opts {
		ro, ok := o.(retryOption)
		if !ok {
			continue
		}
		for _, fm := range ro.fullMethods {
			n, err := parseFullMethod(fm)
			if err != nil {
				return "", err
			}
			names = append(names, n)
		}
	}
	if len(names) > 0 {
		sc.MethodConfig = []methodConfig{{
			Name: names,
			RetryPolicy: retryPolicy{
				MaxAttempts:          retryMaxAttempts,
				InitialBackoff:       durationJSON(retryInitialBackoff),
				MaxBackoff:           durationJSON(retryMaxBackoff),
				BackoffMultiplier:    2,
				RetryableStatusCodes: []string{"UNAVAILABLE"},
			},
		}}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return "", fmt.Errorf("encode service config: %w", err)
	}
	return string(b), nil
}

// parseFullMethod accepts "/package.Service/Method" or "/package.Service/".
func parseFullMethod(fm string) (methodName, error) {
	service, method, ok := strings.Cut(strings.TrimPrefix(fm, "/"), "/")
	if !ok || !strings.HasPrefix(fm, "/") || service == "" || strings.Contains(method, "/") {
		return methodName{}, fmt.Errorf("WithRetries: method %q is not valid: must be \"/package.Service/Method\" or \"/package.Service/\"", fm)
	}
	return methodName{Service: service, Method: method}, nil
}

// durationJSON renders d the way the service config's proto JSON expects.
func durationJSON(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Seconds())
}
