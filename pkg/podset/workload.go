package podset

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// MergeWorkload builds one info per pod set of an admitted or reserved
// workload, in the order of spec.podSets: the flavors of the pod set's
// assignment in status.admission (sorted by name, looked up in flavors),
// every admission check's podSetUpdates in status.admissionChecks (whatever
// the check's state; the caller merges once all are Ready), and sluice's own
// keys: label kueue.x-k8s.io/podset=<pod set> and annotation
// sluice.dev/workload=<workload name>.
//
// A conflict is returned as a *ConflictError wrapped with the pod set's name
// (use errors.As). An update for a pod set the workload does not have, a pod
// set without an assignment or an unknown flavor is a plain error.
func MergeWorkload(wl *v1alpha1.Workload, flavors map[string]*v1alpha1.ResourceFlavor) ([]v1alpha1.PodSetInfo, error) {
	if wl == nil {
		return nil, errors.New("merge workload: workload is nil")
	}
	ref := wl.Namespace + "/" + wl.Name
	if wl.Status.Admission == nil {
		return nil, fmt.Errorf("merge workload %s: status.admission is not set", ref)
	}

	assigned, err := flavorsPerPodSet(wl, flavors)
	if err != nil {
		return nil, fmt.Errorf("merge workload %s: %w", ref, err)
	}
	updates, err := updatesPerPodSet(wl)
	if err != nil {
		return nil, fmt.Errorf("merge workload %s: %w", ref, err)
	}

	infos := make([]v1alpha1.PodSetInfo, 0, len(wl.Spec.PodSets))
	for _, ps := range wl.Spec.PodSets {
		info, err := Merge(Input{
			Name:        ps.Name,
			Template:    ps.Template,
			Flavors:     assigned[ps.Name],
			Labels:      map[string]string{podkeys.PodSetLabel: ps.Name},
			Annotations: map[string]string{podkeys.WorkloadAnnotation: wl.Name},
			Updates:     updates[ps.Name],
		})
		if err != nil {
			return nil, fmt.Errorf("merge workload %s: pod set %q: %w", ref, ps.Name, err)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// flavorsPerPodSet resolves, per pod set, the distinct flavors of its
// assignment sorted by name.
func flavorsPerPodSet(wl *v1alpha1.Workload, flavors map[string]*v1alpha1.ResourceFlavor) (map[string][]*v1alpha1.ResourceFlavor, error) {
	byName := make(map[string]v1alpha1.PodSetAssignment, len(wl.Status.Admission.PodSetAssignments))
	for i, a := range wl.Status.Admission.PodSetAssignments {
		if !hasPodSet(wl, a.Name) {
			return nil, fmt.Errorf("status.admission.podSetAssignments[%d]: pod set %q is not in spec.podSets", i, a.Name)
		}
		byName[a.Name] = a
	}
	out := make(map[string][]*v1alpha1.ResourceFlavor, len(wl.Spec.PodSets))
	for _, ps := range wl.Spec.PodSets {
		a, ok := byName[ps.Name]
		if !ok {
			return nil, fmt.Errorf("pod set %q has no entry in status.admission.podSetAssignments", ps.Name)
		}
		names := make([]string, 0, len(a.Flavors))
		for _, name := range a.Flavors {
			names = append(names, name)
		}
		slices.Sort(names)
		names = slices.Compact(names)
		for _, name := range names {
			f := flavors[name]
			if f == nil {
				return nil, fmt.Errorf("pod set %q is assigned resource flavor %q, which is unknown", ps.Name, name)
			}
			out[ps.Name] = append(out[ps.Name], f)
		}
	}
	return out, nil
}

// updatesPerPodSet groups the checks' updates by pod set, refusing updates
// for pod sets the workload does not have.
func updatesPerPodSet(wl *v1alpha1.Workload) (map[string][]CheckUpdate, error) {
	out := make(map[string][]CheckUpdate)
	for _, check := range wl.Status.AdmissionChecks {
		for _, u := range check.PodSetUpdates {
			if !hasPodSet(wl, u.Name) {
				return nil, fmt.Errorf("admission check %q has an update for pod set %q, which the workload does not have",
					check.Name, u.Name)
			}
			out[u.Name] = append(out[u.Name], CheckUpdate{CheckName: check.Name, Update: u})
		}
	}
	return out, nil
}

func hasPodSet(wl *v1alpha1.Workload, name string) bool {
	return slices.ContainsFunc(wl.Spec.PodSets, func(ps v1alpha1.PodSet) bool { return ps.Name == name })
}
