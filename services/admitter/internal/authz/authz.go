// Package authz decides who may call each of the admitter's gRPC methods.
// Callers prove who they are with the certificate they present (mutual
// TLS, see pkg/mtls): its URI SAN is the SPIFFE ID of their ServiceAccount.
// Every method is listed in the table below with the one kind of caller
// it serves; a method not in the table is refused, so a method added to
// the service without a rule fails closed.
package authz

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// Caller is a kind of caller a method serves.
type Caller string

const (
	// Grouper is a grouper replica: the identities in Policy.Groupers.
	// Only it submits workloads, reports their pods' progress and follows
	// the decisions, since each of those can free or take quota.
	Grouper Caller = "grouper"
	// AnyPeer is any caller whose certificate chains to the admitter's CA,
	// whatever its identity. It is for methods that reveal nothing about
	// workloads and change nothing: health and reflection.
	AnyPeer Caller = "any peer"
	// KubernetesUser is the place of the user-facing calls to come (such
	// as an explanation of why a workload waits). Those will be served on
	// a listener of their own with server-only TLS, and will authenticate
	// the caller's bearer token with a TokenReview and authorize the call
	// with a SubjectAccessReview on the Workload, so that a user sees what
	// their RBAC lets them see. Until Policy.Users is set, every method of
	// this kind is refused.
	KubernetesUser Caller = "Kubernetes user"
)

// Methods says who may call each method the admitter serves, by full
// method name, or by service ("/package.Service/") for all its methods.
var Methods = map[string]Caller{
	admitterv1.AdmitterService_SubmitWorkload_FullMethodName:               Grouper,
	admitterv1.AdmitterService_ReportProgress_FullMethodName:               Grouper,
	admitterv1.AdmitterService_UpdateWorkload_FullMethodName:               Grouper,
	admitterv1.AdmitterService_WatchAdmissions_FullMethodName:              Grouper,
	"/" + healthpb.Health_ServiceDesc.ServiceName + "/":                    AnyPeer,
	"/" + reflectionv1.ServerReflection_ServiceDesc.ServiceName + "/":      AnyPeer,
	"/" + reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName + "/": AnyPeer, //nolint:staticcheck // grpcurl still asks v1alpha
}

// UserAuthorizer authenticates and authorizes a Kubernetes user's call to
// fullMethod (TokenReview, then SubjectAccessReview); nil means allowed.
type UserAuthorizer interface {
	AuthorizeUser(ctx context.Context, fullMethod string) error
}

// Policy is the admitter's authorization.
type Policy struct {
	// Groupers are the identities (URI SANs) of the grouper replicas.
	Groupers []string
	// Users authorizes KubernetesUser methods; nil refuses them all.
	Users UserAuthorizer
	// Rules replaces Methods, for tests; nil means Methods.
	Rules map[string]Caller
	// Plaintext says the server runs without TLS, which it may only on a
	// loopback address: callers cannot be identified, and every caller
	// on this machine is trusted with every method.
	Plaintext bool
}

// Authorize is an auth.AuthFunc (go-grpc-middleware): it lets the call
// through unchanged or refuses it with Unauthenticated (no verified
// certificate) or PermissionDenied (the wrong identity), saying which
// callers the method serves.
func (p *Policy) Authorize(ctx context.Context) (context.Context, error) {
	method, ok := grpc.Method(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "authz: the call's method is unknown")
	}
	rules := p.Rules
	if rules == nil {
		rules = Methods
	}
	caller, ok := callerOf(rules, method)
	if !ok {
		return nil, status.Errorf(codes.PermissionDenied, "%s: no caller may call a method without an authorization rule", method)
	}
	if p.Plaintext {
		return ctx, nil
	}
	if caller == KubernetesUser {
		if p.Users == nil {
			return nil, status.Errorf(codes.PermissionDenied, "%s serves Kubernetes users, and user authorization is not configured", method)
		}
		return ctx, p.Users.AuthorizeUser(ctx, method)
	}
	var err error
	switch caller {
	case AnyPeer:
		_, err = mtls.VerifiedPeerIdentities(ctx, method)
	case Grouper:
		err = mtls.Callers{Who: "the grouper", Identities: p.Groupers}.Authorize(ctx, method)
	default:
		err = status.Errorf(codes.PermissionDenied, "%s: unknown caller kind %q", method, caller)
	}
	if err != nil {
		return nil, err
	}
	return ctx, nil
}

// callerOf finds method's rule: its own, else its service's.
func callerOf(rules map[string]Caller, method string) (Caller, bool) {
	if c, ok := rules[method]; ok {
		return c, true
	}
	i := strings.LastIndex(method, "/")
	if i <= 0 {
		return "", false
	}
	c, ok := rules[method[:i+1]]
	return c, ok
}
