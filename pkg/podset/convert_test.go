package podset

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestInfoRoundTrip(t *testing.T) {
	cases := []struct {
		name  string
		info  v1alpha1.PodSetInfo
		proto *sluicev1.PodSetInfo
	}{
		{
			name:  "empty",
			info:  v1alpha1.PodSetInfo{Name: "main"},
			proto: &sluicev1.PodSetInfo{Name: "main"},
		},
		{
			name: "everything",
			info: v1alpha1.PodSetInfo{
				Name:         "worker",
				Labels:       map[string]string{"kueue.x-k8s.io/podset": "worker"},
				Annotations:  map[string]string{"sluice.dev/workload": "wl"},
				NodeSelector: map[string]string{"zone": "a"},
				Tolerations:  []corev1.Toleration{tolSpotNoOp, tolGPU, tolEvict30},
			},
			proto: &sluicev1.PodSetInfo{
				Name:         "worker",
				Labels:       map[string]string{"kueue.x-k8s.io/podset": "worker"},
				Annotations:  map[string]string{"sluice.dev/workload": "wl"},
				NodeSelector: map[string]string{"zone": "a"},
				Tolerations: []*sluicev1.Toleration{
					{Key: "spot", Value: "true", Effect: "NoSchedule"},
					{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"},
					{Key: "evict", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: seconds(30)},
				},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ToProto(tc.info)
			if !proto.Equal(p, tc.proto) {
				t.Fatalf("ToProto() = %v, want %v", p, tc.proto)
			}
			// Through the wire format, as on the stream.
			raw, err := proto.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var decoded sluicev1.PodSetInfo
			if err := proto.Unmarshal(raw, &decoded); err != nil {
				t.Fatal(err)
			}
			if back := FromProto(&decoded); !reflect.DeepEqual(back, tc.info) {
				t.Fatalf("FromProto(ToProto()) = %+v, want %+v", back, tc.info)
			}
		})
	}
}

func TestFromProtoNormalises(t *testing.T) {
	if got := FromProto(nil); !reflect.DeepEqual(got, v1alpha1.PodSetInfo{}) {
		t.Fatalf("FromProto(nil) = %+v", got)
	}
	got := FromProto(&sluicev1.PodSetInfo{Name: "x", Labels: map[string]string{}, Tolerations: []*sluicev1.Toleration{}})
	if !reflect.DeepEqual(got, v1alpha1.PodSetInfo{Name: "x"}) {
		t.Fatalf("FromProto(empty maps) = %+v, want nil maps", got)
	}
	if got := TolerationFromProto(nil); !reflect.DeepEqual(got, corev1.Toleration{}) {
		t.Fatalf("TolerationFromProto(nil) = %+v", got)
	}
}

func TestTolerationConversionDoesNotAlias(t *testing.T) {
	in := corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds(5)}
	p := TolerationToProto(in)
	*p.TolerationSeconds = 9
	if *in.TolerationSeconds != 5 {
		t.Fatalf("TolerationToProto shares tolerationSeconds with its input")
	}
	back := TolerationFromProto(p)
	*back.TolerationSeconds = 7
	if p.GetTolerationSeconds() != 9 {
		t.Fatalf("TolerationFromProto shares tolerationSeconds with its input")
	}
	info := v1alpha1.PodSetInfo{Name: "m", Labels: map[string]string{"a": "1"}}
	ToProto(info).Labels["a"] = "2"
	if info.Labels["a"] != "1" {
		t.Fatalf("ToProto shares labels with its input")
	}
}
