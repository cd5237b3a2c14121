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
// Contract revisions: each case has the revision of sluice.checks.v1 that
// brought its rule (the first release is revision 1; revision 2 brought
// the request rules and one evaluation key per check; revision 3 brought
// EvaluateRequest.admitted and its rule). The kit reads the revision the
// provider declares in GetProviderInfoResponse.contract_revision (unset is
// 1; one later than the kit knows counts as the latest it knows). A case
// of a later revision still runs, but when the provider breaks its rule
// the case ends Warned, with a detail naming the revision to declare to
// have it enforced, instead of Failed: a released contract never fails a
// provider written against it. Answers are held to the syntax the
// admitter checks (pkg/checkvalidate) in every case, whatever the
// revision, since sluice refuses answers that break it; fixtures and the
// cases of a capability the provider declares hold it whatever the
// revision too. Run logs warnings without failing the test.
//
// Evaluate/AdmittedFirst (revision 3) asks about the sample workload as
// admitted, then as not admitted under fresh keys until an answer is not
// READY (at most 16), then as admitted again: that answer must be no
// worse than the first. It runs before the other Evaluate cases and
// releases every key it used. Give the provider parameters whose capacity
// those 16 evaluations use up and that a Release frees at once, so that
// the case tests something and the cases after it find the capacity free.
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
