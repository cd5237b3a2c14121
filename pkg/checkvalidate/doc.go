// Package checkvalidate checks sluice.checks.v1 messages against the rules
// of the vendor contract. The admitter uses it on every provider answer
// before acting on it, and the provider SDK and conformance kit use the same
// rules, so a provider and sluice can never disagree about what is valid.
//
// It imports no Kubernetes package (providers link it through the SDK), so
// the Kubernetes key and value syntax is checked here with the standard
// library. Errors name the offending field by its path in the message, for
// example `pod_set_updates[0].labels["a/b"]: ...`.
package checkvalidate
