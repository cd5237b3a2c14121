// Package conformance is the conformance kit for sluice.checks.v1
// providers: a suite of cases that any provider, whatever its language,
// must pass before sluice can rely on it. Run it from a Go test with Run,
// or from the command line with sluice-check-conformance:
//
//	sluice-check-conformance --target 127.0.0.1:9091 --check-name pool \
//	    --parameters '{"nodeLabels": {"pool": "a100"}}'
//
// The cases call the provider the way sluice's admitter does and check the
// answers with pkg/checkvalidate, the same rules the admitter applies. Cases
// for capabilities the provider does not advertise are skipped, with the
// reason. The kit imports no Kubernetes module.
package conformance
