package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
)

const (
	grouperID = "spiffe://cluster.local/ns/sluice-system/sa/sluice-grouper"
	checksID  = "spiffe://cluster.local/ns/sluice-system/sa/sluice-checks"
)

// methodStream makes grpc.Method(ctx) answer method, as the server does.
type methodStream struct {
	grpc.ServerTransportStream
	method string
}

func (s methodStream) Method() string { return s.method }

// call is a server-side context of a call to method from a peer that
// presented a certificate with uris (verified unless unverified), or no
// TLS at all when uris is nil.
func call(method string, uris []string, verified bool) context.Context {
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), methodStream{method: method})
	if uris == nil {
		return peer.NewContext(ctx, &peer.Peer{})
	}
	cert := &x509.Certificate{}
	for _, u := range uris {
		parsed, _ := url.Parse(u)
		cert.URIs = append(cert.URIs, parsed)
	}
	state := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	if verified {
		state.VerifiedChains = [][]*x509.Certificate{{cert}}
	}
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: state}})
}

type denyUsers struct{}

func (denyUsers) AuthorizeUser(context.Context, string) error {
	return status.Error(codes.PermissionDenied, "no SubjectAccessReview allows it")
}

func TestAuthorize(t *testing.T) {
	submit := admitterv1.AdmitterService_SubmitWorkload_FullMethodName
	tests := []struct {
		name     string
		policy   Policy
		ctx      context.Context
		want     codes.Code
		wantText string
	}{
		{name: "grouper submits", ctx: call(submit, []string{grouperID}, true), want: codes.OK},
		{name: "grouper among several identities", ctx: call(admitterv1.AdmitterService_WatchAdmissions_FullMethodName, []string{checksID, grouperID}, true), want: codes.OK},
		{name: "another identity from the same CA", ctx: call(admitterv1.AdmitterService_ReportProgress_FullMethodName, []string{checksID}, true),
			want: codes.PermissionDenied, wantText: "may be called only by the grouper (" + grouperID + "); the caller's certificate names " + checksID},
		{name: "certificate without identity", ctx: call(submit, []string{}, true), want: codes.PermissionDenied, wantText: "no identity (URI SAN)"},
		{name: "no TLS", ctx: call(submit, nil, false), want: codes.Unauthenticated, wantText: "needs a client certificate"},
		{name: "unverified certificate", ctx: call(submit, []string{grouperID}, false), want: codes.Unauthenticated},
		{name: "health from any peer", ctx: call(healthpb.Health_Check_FullMethodName, []string{checksID}, true), want: codes.OK},
		{name: "health needs a certificate", ctx: call(healthpb.Health_Check_FullMethodName, nil, false), want: codes.Unauthenticated},
		{name: "method without a rule", ctx: call("/sluice.admitter.v1.AdmitterService/DropEverything", []string{grouperID}, true),
			want: codes.PermissionDenied, wantText: "without an authorization rule"},
		{name: "method without a rule, plaintext", policy: Policy{Plaintext: true}, ctx: call("/other.Service/Call", nil, false), want: codes.PermissionDenied},
		{name: "plaintext on loopback trusts the caller", policy: Policy{Plaintext: true}, ctx: call(submit, nil, false), want: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p.Groupers == nil {
				p.Groupers = []string{grouperID}
			}
			_, err := p.Authorize(tt.ctx)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Authorize: code %v (%v), want %v", got, err, tt.want)
			}
			if tt.wantText != "" && !strings.Contains(status.Convert(err).Message(), tt.wantText) {
				t.Errorf("Authorize: message %q does not contain %q", status.Convert(err).Message(), tt.wantText)
			}
		})
	}
}

// TestUserMethods keeps the place for user-facing calls closed until a
// UserAuthorizer is configured, and asks it when one is.
func TestUserMethods(t *testing.T) {
	const method = "/sluice.admitter.v1.ExplainService/Explain"
	rules := map[string]Caller{method: KubernetesUser}

	ctx := call(method, []string{grouperID}, true)
	if _, err := (&Policy{Groupers: []string{grouperID}, Rules: rules}).Authorize(ctx); status.Code(err) != codes.PermissionDenied {
		t.Errorf("without a UserAuthorizer: %v, want PermissionDenied", err)
	}
	_, err := (&Policy{Users: denyUsers{}, Rules: rules}).Authorize(ctx)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "SubjectAccessReview") {
		t.Errorf("with a UserAuthorizer that denies: %v, want its PermissionDenied", err)
	}
}

// TestEveryAdmitterMethodHasARule fails when a method is added to
// AdmitterService without saying who may call it.
func TestEveryAdmitterMethodHasARule(t *testing.T) {
	sd := admitterv1.AdmitterService_ServiceDesc
	var methods []string
	for _, m := range sd.Methods {
		methods = append(methods, m.MethodName)
	}
	for _, s := range sd.Streams {
		methods = append(methods, s.StreamName)
	}
	for _, m := range methods {
		full := "/" + sd.ServiceName + "/" + m
		if _, ok := Methods[full]; !ok {
			t.Errorf("%s has no rule in Methods", full)
		}
	}
}
