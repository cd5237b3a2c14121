package checkvalidate

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// Kubernetes limits on names, label values and prefixes.
const (
	maxNameLength       = 63
	maxPrefixLength     = 253
	maxLabelValueLength = 63
	maxConditionReason  = 1024
	nameFormatHint      = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
	subdomainFormatHint = "lowercase alphanumerics, '-' or '.', each dot-separated part starting and ending with an alphanumeric"
	conditionReasonHint = "letters, digits, '_', ',' or ':', starting with a letter and not ending with ',' or ':'"
	reservedPrefixKueue = "kueue.x-k8s.io/"
)

var (
	nameRE            = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomainRE    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	conditionReasonRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)
)

// ReservedPrefixes returns the key prefixes that belong to sluice and to
// Kueue's pod integration; providers may not add labels or annotations
// under them.
func ReservedPrefixes() []string {
	return []string{podkeys.SluicePrefix, reservedPrefixKueue}
}

// IsReserved reports whether key lies under a reserved prefix. Only the
// exact prefixes are reserved, not their subdomains.
func IsReserved(key string) bool {
	for _, p := range ReservedPrefixes() {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// QualifiedName checks Kubernetes key syntax (label, annotation and
// node-selector keys, toleration keys): an optional DNS-subdomain prefix
// and a slash, then a name of at most 63 characters.
func QualifiedName(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix {
		if prefix == "" {
			return fmt.Errorf("prefix before '/' must not be empty")
		}
		if err := DNSSubdomain(prefix); err != nil {
			return fmt.Errorf("prefix %q: %w", prefix, err)
		}
	}
	switch {
	case name == "":
		return fmt.Errorf("name part must not be empty")
	case len(name) > maxNameLength:
		return fmt.Errorf("name part must be at most %d characters, got %d", maxNameLength, len(name))
	case !nameRE.MatchString(name):
		return fmt.Errorf("name part %q must consist of %s", name, nameFormatHint)
	}
	return nil
}

// LabelValue checks Kubernetes label value syntax: empty, or at most 63
// characters of a name.
func LabelValue(v string) error {
	switch {
	case v == "":
		return nil
	case len(v) > maxLabelValueLength:
		return fmt.Errorf("must be at most %d characters, got %d", maxLabelValueLength, len(v))
	case !nameRE.MatchString(v):
		return fmt.Errorf("%q must be empty or consist of %s", v, nameFormatHint)
	}
	return nil
}

// DNSSubdomain checks RFC 1123 subdomain syntax (at most 253 characters).
func DNSSubdomain(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > maxPrefixLength:
		return fmt.Errorf("must be at most %d characters, got %d", maxPrefixLength, len(s))
	case !dnsSubdomainRE.MatchString(s):
		return fmt.Errorf("%q must consist of %s", s, subdomainFormatHint)
	}
	return nil
}

// ConditionReason checks that a reason fits a Kubernetes condition reason,
// where the admitter shows it.
func ConditionReason(r string) error {
	switch {
	case len(r) > maxConditionReason:
		return fmt.Errorf("must be at most %d characters, got %d", maxConditionReason, len(r))
	case !conditionReasonRE.MatchString(r):
		return fmt.Errorf("%q must consist of %s (UpperCamelCase, such as CapacityAvailable)", r, conditionReasonHint)
	}
	return nil
}
