// Package approval is the built-in admission check that waits for a
// person: a workload passes once someone annotates its Workload object,
//
//	kubectl annotate workloads.sluice.dev -n <namespace> <name> approval.checks.sluice.dev/approved-by=<who>
//
// and an admitted workload is evicted again when the annotation is
// removed. The check reads Workloads' metadata (an informer cache in the
// checks binary, see Informer), remembers which workload each evaluation
// key belongs to until Release, and pushes a workload's keys on
// WatchChanges whenever its approval appears or disappears, so sluice asks
// again at once.
//
// The check takes no parameters; unknown ones are refused.
package approval

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

const (
	// ProviderName is the provider's name in GetProviderInfo.
	ProviderName = "approval.checks.sluice.dev"
	// Annotation approves a Workload; its value names the approver.
	Annotation = "approval.checks.sluice.dev/approved-by"
	// ReasonApproved is the reason of every READY answer.
	ReasonApproved = "Approved"
	// ReasonAwaitingApproval is the reason of every PENDING answer.
	ReasonAwaitingApproval = "AwaitingApproval"
)

// Info describes the provider; version is the build's version.
func Info(version string) sdk.Info {
	return sdk.Info{
		Name:          ProviderName,
		VendorVersion: version,
		Capabilities: []checksv1.Capability{
			checksv1.Capability_CAPABILITY_RELEASE,
			checksv1.Capability_CAPABILITY_WATCH_CHANGES,
		},
	}
}

// Ref names a Workload object.
type Ref struct {
	Namespace, Name string
}

// Workload is what the check needs to know of a Workload object.
type Workload struct {
	UID string
	// Approved says whether the object carries Annotation; Approver is
	// its value.
	Approved bool
	Approver string
}

// Workloads is the check's view of the Workload objects.
type Workloads interface {
	// Get returns the Workload ref names, and false when there is none.
	Get(ref Ref) (Workload, bool)
	// HasSynced says whether Get sees every Workload that existed when
	// the view started.
	HasSynced() bool
	// OnApprovalChange registers f, called with a Workload's Ref once Get
	// sees that its approval appeared or disappeared (the object's
	// creation and deletion included); the view reports f's errors. It is
	// called before the view starts.
	OnApprovalChange(f func(Ref) error)
}

// Checker is the approval check.
type Checker struct {
	workloads Workloads
	notifier  sdk.Notifier // set once by sdk.NewServer, before any call

	mu    sync.Mutex
	holds holds
}

var (
	_ sdk.Checker        = (*Checker)(nil)
	_ sdk.Prober         = (*Checker)(nil)
	_ sdk.NotifierSetter = (*Checker)(nil)
)

// New returns a Checker that reads workloads and pushes the keys of a
// workload whose approval changes.
func New(workloads Workloads) *Checker {
	c := &Checker{workloads: workloads, holds: newHolds()}
	workloads.OnApprovalChange(c.approvalChanged)
	return c
}

// SetNotifier implements sdk.NotifierSetter.
func (c *Checker) SetNotifier(n sdk.Notifier) { c.notifier = n }

// Probe is ready once the view of Workloads has synced: before that, a
// Workload that is approved could look unknown.
func (c *Checker) Probe(context.Context) (bool, string, error) {
	if !c.workloads.HasSynced() {
		return false, "waiting for the Workload cache to sync", nil
	}
	return true, "", nil
}

// Evaluate answers READY when the workload's Workload object carries the
// approval annotation, and PENDING with the command that approves it
// otherwise (also when the object is not found).
func (c *Checker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	var none struct{}
	if err := sdk.DecodeParameters(req, &none); err != nil {
		return nil, err
	}
	if !c.workloads.HasSynced() {
		return nil, status.Error(codes.FailedPrecondition, "the Workload cache has not synced yet")
	}
	w := req.GetWorkload()
	ref := Ref{Namespace: w.GetNamespace(), Name: w.GetName()}
	// Hold the key before reading: a change that Get misses has not yet
	// collected the workload's keys, so it pushes this one.
	c.mu.Lock()
	c.holds.add(req.GetEvaluationKey(), ref)
	c.mu.Unlock()

	obj, found := c.workloads.Get(ref)
	// A uid that differs is another object of the same name: the one
	// evaluated is gone, and its approval cannot come.
	if !found || !obj.Approved || (w.GetUid() != "" && obj.UID != w.GetUid()) {
		return pending(ref), nil
	}
	return ready(obj.Approver), nil
}

// Release forgets the key.
func (c *Checker) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds.remove(req.GetEvaluationKey())
	return nil
}

// approvalChanged pushes the keys held for ref: their answer changed.
func (c *Checker) approvalChanged(ref Ref) error {
	c.mu.Lock()
	keys := c.holds.keys(ref)
	c.mu.Unlock()
	if len(keys) == 0 || c.notifier == nil {
		return nil
	}
	if err := c.notifier.Changed(keys...); err != nil {
		return fmt.Errorf("pushing the evaluation keys of Workload %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return nil
}

// ApproveCommand is the command that approves the Workload ref.
func ApproveCommand(ref Ref) string {
	return "kubectl annotate workloads.sluice.dev -n " + ref.Namespace + " " + ref.Name + " " + Annotation + "=$USER"
}

func pending(ref Ref) *checksv1.EvaluateResponse {
	resp := sdk.Pending("waiting for approval; to approve, run: "+ApproveCommand(ref), 0)
	resp.Reason = ReasonAwaitingApproval
	return resp
}

func ready(approver string) *checksv1.EvaluateResponse {
	resp := sdk.Ready()
	resp.Reason = ReasonApproved
	resp.Message = "approved"
	if approver != "" {
		resp.Message = sdk.TruncateMessage("approved by " + approver)
	}
	return resp
}
