// Package serve holds the process side every sluice service shares: one
// HTTP listener for liveness (/healthz), readiness (/readyz) and Prometheus
// metrics (/metrics), the common command-line flags, and shutdown on
// SIGTERM or SIGINT.
//
// One listener serves all three paths so an operator opens, probes and
// scrapes a single port per pod (--http-addr).
package serve
