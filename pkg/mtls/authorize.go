package mtls

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Callers are the callers a server lets call a method: those whose
// verified client certificate carries one of Identities as a URI SAN. The
// CA decides who may connect at all; Callers decide which of those may
// call, so that one CA can sign every service's certificate.
type Callers struct {
	// Who names the callers in errors, such as "the grouper"; empty, the
	// errors name only the identities.
	Who string
	// Identities are the URI SANs allowed, such as SPIFFE IDs.
	Identities []string
}

// Authorize returns nil when the caller of ctx presented a verified
// certificate that names one of c.Identities. Otherwise it returns a
// status error about method: Unauthenticated without a verified
// certificate, PermissionDenied naming the identities allowed and those
// the certificate names.
func (c Callers) Authorize(ctx context.Context, method string) error {
	ids, err := VerifiedPeerIdentities(ctx, method)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(ids, c.allows) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s may be called only by %s; the caller's certificate names %s",
		method, c.describe(), describeIdentities(ids))
}

func (c Callers) allows(id string) bool { return slices.Contains(c.Identities, id) }

// describe says who may call, for errors.
func (c Callers) describe() string {
	allowed := strings.Join(c.Identities, ", ")
	if c.Who == "" {
		return "a client whose certificate names " + allowed
	}
	return c.Who + " (" + allowed + ")"
}

func describeIdentities(ids []string) string {
	if len(ids) == 0 {
		return "no identity (URI SAN)"
	}
	return strings.Join(ids, ", ")
}

// VerifiedPeerIdentities is PeerIdentities for a server that needs to
// know its caller: without a verified client certificate it returns an
// Unauthenticated status error about method.
func VerifiedPeerIdentities(ctx context.Context, method string) ([]string, error) {
	ids, ok := PeerIdentities(ctx)
	if !ok {
		return nil, status.Errorf(codes.Unauthenticated, "%s needs a client certificate signed by the server's CA", method)
	}
	return ids, nil
}

// CheckIdentity checks that id can be a certificate's URI SAN: an
// absolute URI such as spiffe://cluster.local/ns/sluice-system/sa/sluice-admitter.
// Identities are compared as strings, so a typo would match no caller
// and refuse them all; this catches the typos that are not URIs.
func CheckIdentity(id string) error {
	if id == "" {
		return errors.New("an identity must not be empty")
	}
	u, err := url.Parse(id)
	if err != nil {
		return fmt.Errorf("identity %q is not a URI: %w", id, err)
	}
	if u.Scheme == "" || (u.Host == "" && u.Opaque == "") {
		return fmt.Errorf("identity %q is not an absolute URI such as %s", id,
			ServiceIdentity(DefaultTrustDomain, "sluice-system", "sluice-admitter"))
	}
	return nil
}

// IdentityList is a flag of certificate identities (URI SANs) that may be
// repeated, one identity each time; each must pass CheckIdentity.
type IdentityList []string

func (l *IdentityList) String() string { return strings.Join(*l, ",") }

// Set adds one identity.
func (l *IdentityList) Set(id string) error {
	if err := CheckIdentity(id); err != nil {
		return err
	}
	*l = append(*l, id)
	return nil
}
