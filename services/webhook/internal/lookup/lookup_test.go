package lookup

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// classReader holds the WorkloadPriorityClasses a reader sees, counting
// the reads; err fails every read.
type classReader struct {
	client.Reader
	classes map[string]bool
	err     error
	reads   int
}

func (r *classReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.reads++
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != WorkloadPriorityClassGVK {
		return errors.New("read of " + gvk.String() + ", want a WorkloadPriorityClass")
	}
	switch {
	case r.err != nil:
		return r.err
	case !r.classes[key.Name]:
		return apierrors.NewNotFound(schema.GroupResource{Group: "sluice.dev", Resource: "workloadpriorityclasses"}, key.Name)
	}
	obj.SetName(key.Name)
	return nil
}

// A class the cache has is found there; one it lacks is read once from
// the API server, which may have a class created a moment ago that the
// watch has not delivered yet.
func TestPriorityClassExists(t *testing.T) {
	tests := []struct {
		name          string
		cached, live  map[string]bool
		liveErr       error
		want          bool
		wantErr       bool
		wantLiveReads int
	}{
		{name: "in the cache", cached: map[string]bool{"urgent": true}, want: true},
		{name: "created a moment ago", live: map[string]bool{"urgent": true}, want: true, wantLiveReads: 1},
		{name: "nowhere", want: false, wantLiveReads: 1},
		{name: "the API server fails", liveErr: errors.New("connection refused"), wantErr: true, wantLiveReads: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cached := &classReader{classes: tc.cached}
			live := &classReader{classes: tc.live, err: tc.liveErr}
			c := New(nil, Options{})
			c.readers.Store(&readers{cached: cached, live: live})
			got, err := c.PriorityClassExists(context.Background(), "urgent")
			if (err != nil) != tc.wantErr {
				t.Fatalf("PriorityClassExists error = %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("PriorityClassExists = %v, want %v", got, tc.want)
			}
			if cached.reads != 1 || live.reads != tc.wantLiveReads {
				t.Errorf("reads from the cache %d, from the API server %d; want 1 and %d", cached.reads, live.reads, tc.wantLiveReads)
			}
		})
	}
}

func TestPriorityClassExistsBeforeSync(t *testing.T) {
	if _, err := New(nil, Options{}).PriorityClassExists(context.Background(), "urgent"); !errors.Is(err, ErrNotSynced) {
		t.Errorf("PriorityClassExists before the caches synced: error %v, want ErrNotSynced", err)
	}
}
