package webhook

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// What sluice trusts on a pod is sluice's to write: the role hash that
// books a group's pod sets, and every sluice.dev/ key.

// Two pods of one group that claim one role hash but request 1 and 3 cpu
// would be booked as two pods of 1 cpu; each gets the hash of its own spec.
func TestUserRoleHashIsReplaced(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-hash"
	createNamespace(ctx, t, ns)
	group := map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "chosen-hash"}
	hashes := map[string]bool{}
	for name, cpu := range map[string]string{"small": "1", "large": "3"} {
		pod := newPod(ns, name, group, map[string]string{
			podkeys.PodGroupTotalCountAnnotation: "2",
			podkeys.RoleHashAnnotation:           "aaaaaaaa",
		})
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
		if err := s.client.Create(ctx, pod); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		assertMarked(t, pod, "q") // the hash of the stored spec
		hashes[pod.Annotations[podkeys.RoleHashAnnotation]] = true
	}
	if len(hashes) != 2 {
		t.Errorf("role hashes = %v, want two: the pods request different cpu", hashes)
	}
}

// The messages below are documented in docs/webhook.md.
func TestSluiceKeysAreRefused(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-keys"
	createNamespace(ctx, t, ns)
	const rule = `: Forbidden: only sluice may write keys under sluice.dev/; remove this key`
	queued := map[string]string{podkeys.QueueNameLabel: "q"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        string // the whole error; empty: created
	}{
		{
			name:        "forged-workload-uid",
			labels:      queued,
			annotations: map[string]string{podkeys.WorkloadUIDAnnotation: "forged"},
			want: `admission webhook "mutate.pods.sluice.dev" denied the request: Pod "forged-workload-uid" is invalid: ` +
				`metadata.annotations[sluice.dev/workload-uid]` + rule,
		},
		{
			name:   "sluice-label",
			labels: map[string]string{podkeys.QueueNameLabel: "q", "sluice.dev/team": "a"},
			want: `admission webhook "mutate.pods.sluice.dev" denied the request: Pod "sluice-label" is invalid: ` +
				`metadata.labels[sluice.dev/team]` + rule,
		},
		{
			// Continuing one's trace through the annotation is no longer
			// possible: the trace of the create request is continued.
			name:        "user-traceparent",
			labels:      queued,
			annotations: map[string]string{podkeys.TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			want: `admission webhook "mutate.pods.sluice.dev" denied the request: Pod "user-traceparent" is invalid: ` +
				`metadata.annotations[sluice.dev/traceparent]` + rule,
		},
		{
			name:        "subdomain-keys",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", "nodepool.sluice.dev/x": "y"},
			annotations: map[string]string{"nodepool.sluice.dev/x": "y"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(ns, tc.name, tc.labels, tc.annotations)
			err := s.client.Create(ctx, pod)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("create pod: %v", err)
				}
				assertMarked(t, pod, "q")
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("create pod: error %v\nwant %s", err, tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Errorf("error reason = %v, want Invalid", apierrors.ReasonForError(err))
			}
			if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
				t.Errorf("get refused pod: %v, want NotFound", err)
			}
		})
	}
	body, err := s.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("read metrics: %v", err)
	}
	if v := metricValue(body, `sluice_webhook_pods_rejected_total{reason="Forbidden:sluice.dev"}`); v < 3 {
		t.Errorf(`pods_rejected_total{reason="Forbidden:sluice.dev"} = %v, want at least 3`, v)
	}
}

// A pod created inside a trace continues it: kube-apiserver passes the
// create request's trace context to the webhook in the traceparent header.
func TestPodContinuesTheCreateRequestTrace(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-trace"
	createNamespace(ctx, t, ns)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := tracingClient(t, "00-"+trace+"-00f067aa0ba902b7-01")

	pod := newPod(ns, "traced", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	if err := traced.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, pod, "q")
	if got := pod.Annotations[podkeys.TraceparentAnnotation]; traceID(got) != trace {
		t.Errorf("traceparent = %q, want one of the create request's trace %s", got, trace)
	}

	untraced := newPod(ns, "untraced", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	if err := s.client.Create(ctx, untraced); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, untraced, "q")
	if got := untraced.Annotations[podkeys.TraceparentAnnotation]; traceID(got) == trace {
		t.Errorf("traceparent = %q continues another request's trace, want a new one", got)
	}
}

// traceID returns the trace ID of a W3C trace context, or "" when the text
// is not one.
func traceID(traceparent string) string {
	if !traceparentRE.MatchString(traceparent) {
		return ""
	}
	return traceparent[3:35]
}

// tracingClient is the suite's client sending traceparent with every
// request, as a client that traces its calls does.
func tracingClient(t *testing.T, traceparent string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(s.env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("traceparent", traceparent)
			return rt.RoundTrip(r)
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: s.client.Scheme()})
	if err != nil {
		t.Fatalf("tracing client: %v", err)
	}
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
