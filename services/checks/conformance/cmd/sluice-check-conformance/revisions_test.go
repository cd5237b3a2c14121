package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// oneSlot holds one slot for the first evaluation key that asks and
// answers RETRY to every other until it is released: it serves in arrival
// order, whether a workload is admitted or not, so it breaks the rule of
// EvaluateRequest.admitted (revision 3).
type oneSlot struct {
	mu     sync.Mutex
	holder string
}

func (o *oneSlot) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holder == "" {
		o.holder = req.GetEvaluationKey()
	}
	if o.holder == req.GetEvaluationKey() {
		return sdk.Ready(), nil
	}
	return sdk.Retry("the slot is taken", time.Minute), nil
}

func (o *oneSlot) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holder == req.GetEvaluationKey() {
		o.holder = ""
	}
	return nil
}

// TestWarnings checks how the command reports a rule of a later revision
// than the provider declares: WARN, counted in the summary, exit 0; the
// same provider declaring that revision fails.
func TestWarnings(t *testing.T) {
	tests := []struct {
		name     string
		revision checksv1.ContractRevision
		wantCode int
		wantOut  []string
	}{
		{name: "revision 2 (the SDK's default)", wantCode: 0, wantOut: []string{
			"WARN  Evaluate/AdmittedFirst (",
			"\n      the admitted workload (admitted=true) was answered STATE_READY under key",
			"[a rule of contract revision 3, and the provider declares revision 2 (CONTRACT_REVISION_2): declare contract_revision CONTRACT_REVISION_3",
			"\n18 passed, 0 failed, 4 skipped, 1 warned\n",
		}},
		{name: "revision 3", revision: checksv1.ContractRevision_CONTRACT_REVISION_3, wantCode: 1, wantOut: []string{
			"FAIL  Evaluate/AdmittedFirst (",
			"\n18 passed, 1 failed, 4 skipped\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := sdk.Info{Name: "slot.checks.example.com", Capabilities: []checksv1.Capability{checksv1.Capability_CAPABILITY_RELEASE}, ContractRevision: tt.revision}
			target := sdktest.Start(t, info, &oneSlot{})
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), []string{"--target", target, "--timeout", "5s"}, &stdout, &stderr); code != tt.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, &stdout, &stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout does not contain %q:\n%s", w, &stdout)
				}
			}
		})
	}
}
