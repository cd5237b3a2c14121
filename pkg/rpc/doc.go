// Package rpc wires gRPC servers and clients the same way in every sluice
// service: OpenTelemetry tracing, structured call logging, panic recovery,
// keepalive settings that servers and clients agree on, health and
// reflection on servers, and round-robin balancing on clients.
package rpc
