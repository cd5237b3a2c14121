// Package mtls gives sluice's gRPC servers and clients transport security
// from PEM files that are read again while the process runs, so that a
// rotated certificate (cert-manager's, or a local CA's) takes effect
// without a restart. It also reads the identity a verified peer's
// certificate carries (its URI SAN, a SPIFFE ID such as
// spiffe://cluster.local/ns/sluice-system/sa/sluice-grouper), authorises a
// call by it (Callers), and decides when plaintext is allowed at all: only
// to and on loopback addresses.
package mtls
