package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/services/checks/providers/approval"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
	"github.com/sluice-dev/sluice/test/harness"
)

// wait bounds every condition the tests wait for.
const wait = 30 * time.Second

// streamProbeKey is pushed by the test itself to learn that the
// WatchChanges stream is open on the server: the SDK pushes only to
// streams open at the time.
const streamProbeKey = "test/stream-open"

// TestApprovalFlipsAndRevocationPushes walks one Workload through the
// check: PENDING with the command to run, READY once annotated, and, when
// the annotation is removed, its key pushed on WatchChanges and PENDING
// again.
func TestApprovalFlipsAndRevocationPushes(t *testing.T) {
	ctx := t.Context()
	k8s := adminClient(t)
	ns := createNamespace(ctx, t, k8s, "approval-flip")
	wl := createWorkload(ctx, t, k8s, ns, "train-1", "")
	check := startCheck(t)
	changes := check.watch(ctx, t)

	req := evaluateRequest(wl, "reservation-1")
	want := "kubectl annotate workloads.sluice.dev -n " + ns + " train-1 approval.checks.sluice.dev/approved-by=$USER"
	resp := check.evaluate(ctx, t, req)
	if resp.GetState() != checksv1.State_STATE_PENDING || !strings.Contains(resp.GetMessage(), want) {
		t.Fatalf("before approval: %v %q, want PENDING with %q", resp.GetState(), resp.GetMessage(), want)
	}

	annotate(ctx, t, k8s, wl, "alice")
	changes.await(t, req.GetEvaluationKey())
	if resp := check.evaluate(ctx, t, req); resp.GetState() != checksv1.State_STATE_READY || resp.GetMessage() != "approved by alice" {
		t.Fatalf("after approval: %v %q, want READY, approved by alice", resp.GetState(), resp.GetMessage())
	}

	annotate(ctx, t, k8s, wl, "")
	changes.await(t, req.GetEvaluationKey())
	if resp := check.evaluate(ctx, t, req); resp.GetState() != checksv1.State_STATE_PENDING || !strings.Contains(resp.GetMessage(), want) {
		t.Fatalf("after revocation: %v %q, want PENDING with %q", resp.GetState(), resp.GetMessage(), want)
	}
}

// TestServiceAccountHasLeastAccess checks that the check's token may list
// Workloads and nothing more: no get, no writes.
func TestServiceAccountHasLeastAccess(t *testing.T) {
	ctx := t.Context()
	k8s := adminClient(t)
	ns := createNamespace(ctx, t, k8s, "approval-rbac")
	wl := createWorkload(ctx, t, k8s, ns, "rbac-1", "")
	mc, err := metadata.NewForConfig(checkConfig)
	if err != nil {
		t.Fatal(err)
	}
	workloads := mc.Resource(approval.WorkloadResource)
	if _, err := workloads.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list Workloads: %v, want allowed", err)
	}
	if _, err := workloads.Namespace(ns).Get(ctx, wl.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get Workload: %v, want Forbidden", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + approval.Annotation + `":"self"}}}`)
	if _, err := workloads.Namespace(ns).Patch(ctx, wl.Name, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("patch Workload: %v, want Forbidden", err)
	}
}

// TestConformance runs the kit against the check with a Workload that
// exists and is approved; the trigger removes the approval.
func TestConformance(t *testing.T) {
	ctx := t.Context()
	k8s := adminClient(t)
	ns := createNamespace(ctx, t, k8s, "approval-kit")
	wl := createWorkload(ctx, t, k8s, ns, "kit-1", "conformance")
	check := startCheck(t)
	conformance.Run(t, check.conn, conformance.Options{
		CheckName: "approval",
		Workload: &checksv1.Workload{
			Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID),
			PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
		TriggerChange: func(ctx context.Context, _ string) error {
			return patchApproval(ctx, k8s, wl, "")
		},
	})
}

// check is the approval check served on loopback.
type check struct {
	srv  *sdk.Server
	conn *grpc.ClientConn
}

// startCheck runs the check's informer with the ServiceAccount's token
// and serves the check until the test ends, once Probe says it is ready.
func startCheck(t *testing.T) *check {
	t.Helper()
	mc, err := metadata.NewForConfig(checkConfig)
	if err != nil {
		t.Fatal(err)
	}
	workloads, err := approval.NewInformer(mc)
	if err != nil {
		t.Fatal(err)
	}
	checker := approval.New(workloads)
	srv, err := sdk.NewServer(approval.Info("test"), checker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		workloads.Run(ctx, testr.New(t))
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	conn := dial(t, sdktest.Serve(t, srv))

	pctx, pcancel := context.WithTimeout(t.Context(), wait)
	defer pcancel()
	identity := checksv1.NewIdentityServiceClient(conn)
	err = harness.Poll(pctx, func() error {
		resp, err := identity.Probe(pctx, &checksv1.ProbeRequest{})
		if err != nil {
			return err
		}
		if !resp.GetReady() {
			return errors.New("not ready: " + resp.GetMessage())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the check did not become ready: %v", err)
	}
	return &check{srv: srv, conn: conn}
}

func (c *check) evaluate(ctx context.Context, t *testing.T, req *checksv1.EvaluateRequest) *checksv1.EvaluateResponse {
	t.Helper()
	resp, err := checksv1.NewCheckServiceClient(c.conn).Evaluate(ctx, req)
	if err != nil {
		t.Fatalf("Evaluate(%s): %v", req.GetEvaluationKey(), err)
	}
	return resp
}

// changes are the keys a WatchChanges stream received.
type changes chan []string

// watch opens a WatchChanges stream and returns once the server pushes to
// it (the test pushes streamProbeKey until it arrives).
func (c *check) watch(ctx context.Context, t *testing.T) changes {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := checksv1.NewCheckServiceClient(c.conn).WatchChanges(sctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatalf("WatchChanges: %v", err)
	}
	ch := make(changes, 16)
	go func() {
		defer close(ch)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- resp.GetEvaluationKeys()
		}
	}()
	deadline := time.After(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.srv.Changed(streamProbeKey); err != nil {
			t.Fatal(err)
		}
		select {
		case keys, open := <-ch:
			if !open {
				t.Fatal("WatchChanges stream ended")
			}
			if slices.Contains(keys, streamProbeKey) {
				return ch
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the WatchChanges stream got no push within %s", wait)
		}
	}
}

// await waits until key arrives, skipping the test's own probe key.
func (ch changes) await(t *testing.T, key string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case keys, open := <-ch:
			if !open {
				t.Fatalf("WatchChanges stream ended before key %q arrived", key)
			}
			if slices.Contains(keys, key) {
				return
			}
			if i := slices.IndexFunc(keys, func(k string) bool { return k != streamProbeKey }); i >= 0 {
				t.Fatalf("WatchChanges pushed %v, want only %q", keys, key)
			}
		case <-deadline:
			t.Fatalf("key %q was not pushed within %s", key, wait)
		}
	}
}

func evaluateRequest(wl *v1alpha1.Workload, reservation string) *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "approval",
		EvaluationKey: string(wl.UID) + "/" + reservation + "/approval",
		Workload: &checksv1.Workload{
			Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID),
			PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
	}
}

func adminClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := kube.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createNamespace creates a namespace named prefix and a random suffix,
// so that the tests can run more than once against one API server.
func createNamespace(ctx context.Context, t *testing.T, k8s client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace %s-*: %v", prefix, err)
	}
	return ns.Name
}

// createWorkload creates a Workload, approved by approver unless empty.
func createWorkload(ctx context.Context, t *testing.T, k8s client.Client, ns, name, approver string) *v1alpha1.Workload {
	t.Helper()
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.WorkloadSpec{
			QueueName: "q",
			PodSets:   []v1alpha1.PodSet{{Name: "main", Count: 1}},
		},
	}
	if approver != "" {
		wl.Annotations = map[string]string{approval.Annotation: approver}
	}
	if err := k8s.Create(ctx, wl); err != nil {
		t.Fatalf("create Workload %s/%s: %v", ns, name, err)
	}
	return wl
}

// annotate approves wl as approver, or removes its approval when empty.
func annotate(ctx context.Context, t *testing.T, k8s client.Client, wl *v1alpha1.Workload, approver string) {
	t.Helper()
	if err := patchApproval(ctx, k8s, wl, approver); err != nil {
		t.Fatal(err)
	}
}

func patchApproval(ctx context.Context, k8s client.Client, wl *v1alpha1.Workload, approver string) error {
	value := `null`
	if approver != "" {
		value = `"` + approver + `"`
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+approval.Annotation+`":`+value+`}}}`))
	obj := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: wl.Namespace, Name: wl.Name}}
	if err := k8s.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("annotating Workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := conformance.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
