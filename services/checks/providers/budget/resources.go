package budget

import (
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// Resources are amounts by resource name, such as cpu or nvidia.com/gpu.
type Resources map[string]resource.Quantity

// Cost is what a workload asks for: for every pod set, count times one
// pod's requests. Errors are INVALID_ARGUMENT and name the field.
func Cost(w *checksv1.Workload) (Resources, error) {
	cost := Resources{}
	for i, ps := range w.GetPodSets() {
		if ps.GetCount() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "workload.pod_sets[%d].count: %d is negative", i, ps.GetCount())
		}
		for _, name := range slices.Sorted(maps.Keys(ps.GetRequests())) {
			q, err := resource.ParseQuantity(ps.GetRequests()[name])
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "workload.pod_sets[%d].requests[%q]: %q is not a Kubernetes quantity", i, name, ps.GetRequests()[name])
			}
			q.Mul(int64(ps.GetCount()))
			cost.add(Resources{name: q})
		}
	}
	return cost, nil
}

// add adds other to r.
func (r Resources) add(other Resources) {
	for name, q := range other {
		sum := r[name]
		sum.Add(q)
		r[name] = sum
	}
}

// sub subtracts other from r.
func (r Resources) sub(other Resources) {
	for name, q := range other {
		diff := r[name]
		diff.Sub(q)
		r[name] = diff
	}
}

// clone returns a copy of r.
func (r Resources) clone() Resources {
	out := make(Resources, len(r))
	out.add(r)
	return out
}

// over returns, sorted, the resources in limits that r goes over.
// Resources without a limit are never over.
func (r Resources) over(limits Resources) []string {
	var names []string
	for name, limit := range limits {
		if q := r[name]; q.Cmp(limit) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// format writes the named amounts as "cpu 4, memory 8Gi".
func (r Resources) format(names []string) string {
	parts := make([]string, len(names))
	for i, name := range names {
		q := r[name]
		parts[i] = name + " " + q.String()
	}
	return strings.Join(parts, ", ")
}
