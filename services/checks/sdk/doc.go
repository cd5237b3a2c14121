// Package sdk turns a Go value with two methods into an admission-check
// provider that speaks sluice.checks.v1.
//
// A provider implements Checker (Evaluate and Release) and describes
// itself with Info; NewServer wraps it in a gRPC server that serves
// IdentityService, CheckService, grpc.health.v1 and reflection, permits the
// caller's keepalive pings, continues the caller's W3C trace, turns panics
// into INTERNAL errors, refuses malformed requests with INVALID_ARGUMENT and
// checks every answer against the contract before it leaves, so a bug in
// the provider shows up as a clear INTERNAL error instead of an answer
// sluice would refuse. Ready, Pending, Retry and Rejected build answers;
// DecodeParameters reads an AdmissionCheck's parameters into a struct.
//
// Info.ContractRevision declares the revision of the contract the
// provider keeps; left zero, the Server declares CONTRACT_REVISION_2,
// whose request rules it enforces itself.
//
// A provider that changes answers on its own declares
// CAPABILITY_WATCH_CHANGES; the Server then serves WatchChanges, and
// Server.Changed (or the Notifier a NotifierSetter Checker is given) pushes
// evaluation keys to every open stream without blocking. A Checker that
// implements WatchObserver hears of every stream that opens, as sluice
// opens one after it (or the provider) restarted, before evaluating again
// everything it holds.
//
// WithTLS (and Main's --tls-* flags) serve TLS from PEM files read again
// while the server runs, and mutual TLS with a client CA;
// WithClientIdentities (--client-identity) then serves only the clients
// whose certificates carry the identities given. Without TLS, Serve (and
// Main) serve plaintext only on a loopback address or a unix socket,
// unless WithInsecurePlaintext (--insecure-plaintext) says otherwise on
// purpose; sluice's admitter likewise talks plaintext only to a provider
// on loopback.
//
// The package imports no Kubernetes module.
package sdk
