// Package conformance is the conformance kit for sluice.checks.v1
// providers: a suite of cases that any provider, whatever its language,
// must pass before sluice can rely on it. Run it from a Go test with Run,
// or from the command line with sluice-check-conformance:
//
//	sluice-check-conformance --target 127.0.0.1:9091 --check-name pool \
//	    --parameters '{"nodeLabels": {"pool": "a100"}}' \
//	    --fixtures fixtures.json --keepalive-soak 100s
//
// The cases call the provider the way sluice's admitter does, with the
// same evaluation keys ("<workload uid>/<reservation id>/<check name>"),
// and check the answers with pkg/checkvalidate, the same rules the
// admitter applies. They also send each kind of malformed request the
// contract names, which must be answered INVALID_ARGUMENT. Cases for
// capabilities the provider does not advertise are skipped, with the
// reason.
//
// The generic cases can only tell that an answer is valid; fixtures (see
// Fixture) say what the answer to a given request must be, field by
// field, as it arrives on the wire. The keepalive soak (Options.
// KeepaliveSoak) holds an idle connection open through sluice's pings.
//
// For a provider that advertises CAPABILITY_WATCH_CHANGES, the kit opens
// the WatchChanges stream and holds it idle (WatchChanges/Open), and, when
// Options.TriggerChange (--trigger-change-command) can make the provider
// change an answer, checks that the provider pushes that evaluation key,
// and only keys the kit sent (WatchChanges/PushedKeys).
//
// A provider that serves TLS is dialled with DialCredentials and TLS
// credentials (mtls.Files.TLSClientCredentials; the command's --ca-file,
// --cert-file, --key-file and --server-name), as sluice dials one whose
// AdmissionCheck has spec.tls. A provider the kit cannot connect to fails
// one case, Connect, that says why, and nothing else runs.
//
// The kit imports no Kubernetes module.
package conformance
