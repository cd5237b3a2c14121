package changewatch

import (
	"cmp"
	"slices"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ReaskOrder orders the workloads whose evaluations an open asks again
// (Config.Opened): admitted workloads first, the earliest admitted first,
// then those waiting for their checks, the earliest reserved first. A
// provider that restarted and lost what it held thus hears about running
// workloads before waiting ones, and counts them first.
//
// This is a courtesy, not the guarantee: the evaluations are asked
// concurrently, a waiting workload's own retry may come first, and other
// callers order nothing. What keeps a running workload from being evicted
// for a waiting one is the provider's rule (CONTRACT_REVISION_3, sent
// EvaluateRequest.admitted): what it holds for workloads that are not
// admitted never makes an admitted one's answer worse.
func ReaskOrder(wls []*v1alpha1.Workload) []*v1alpha1.Workload {
	out := slices.Clone(wls)
	since := func(wl *v1alpha1.Workload, t string) int64 {
		if c := workload.Condition(wl, t); c != nil {
			return c.LastTransitionTime.UnixNano()
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b *v1alpha1.Workload) int {
		aa, ba := workload.IsAdmitted(a), workload.IsAdmitted(b)
		switch {
		case aa && !ba:
			return -1
		case !aa && ba:
			return 1
		case aa:
			return cmp.Compare(since(a, v1alpha1.WorkloadAdmitted), since(b, v1alpha1.WorkloadAdmitted))
		default:
			return cmp.Compare(since(a, v1alpha1.WorkloadQuotaReserved), since(b, v1alpha1.WorkloadQuotaReserved))
		}
	})
	return out
}
