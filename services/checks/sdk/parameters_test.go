package sdk

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

type poolParams struct {
	NodeLabels map[string]string `json:"nodeLabels"`
	MaxPods    int               `json:"maxPods"`
	Taint      *struct {
		Key string `json:"key"`
	} `json:"taint"`
}

func TestDecodeParameters(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]any
		nilPar  bool
		want    poolParams
		wantErr string
	}{
		{name: "absent", nilPar: true},
		{name: "full", params: map[string]any{"nodeLabels": map[string]any{"pool": "a100"}, "maxPods": 4, "taint": map[string]any{"key": "k"}},
			want: poolParams{NodeLabels: map[string]string{"pool": "a100"}, MaxPods: 4}},
		{name: "wrong type", params: map[string]any{"nodeLabels": "pool=a100"}, wantErr: "parameters.nodeLabels: expected object, got string"},
		{name: "wrong nested type", params: map[string]any{"nodeLabels": map[string]any{"pool": 3}}, wantErr: "parameters.nodeLabels: expected string, got number"},
		{name: "fraction for int", params: map[string]any{"maxPods": 1.5}, wantErr: "parameters.maxPods: expected number, got number 1.5"},
		{name: "unknown field", params: map[string]any{"nodeLabel": map[string]any{}}, wantErr: `parameters: unknown field "nodeLabel"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &checksv1.EvaluateRequest{}
			if !tt.nilPar {
				s, err := structpb.NewStruct(tt.params)
				if err != nil {
					t.Fatal(err)
				}
				req.Parameters = s
			}
			var got poolParams
			err := DecodeParameters(req, &got)
			if tt.wantErr != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.wantErr) {
					t.Fatalf("error = %v, want INVALID_ARGUMENT containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.MaxPods != tt.want.MaxPods || len(got.NodeLabels) != len(tt.want.NodeLabels) || got.NodeLabels["pool"] != tt.want.NodeLabels["pool"] {
				t.Errorf("decoded %+v, want %+v", got, tt.want)
			}
		})
	}
}
