package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// Defaults of Options.
const (
	DefaultCheckName    = "conformance"
	DefaultTimeout      = 10 * time.Second
	DefaultReadyTimeout = 30 * time.Second
)

// Options say how to call the provider.
type Options struct {
	// CheckName is sent as check_name (default DefaultCheckName).
	CheckName string
	// Parameters are sent as the AdmissionCheck's parameters; give what
	// your provider needs to answer.
	Parameters *structpb.Struct
	// Timeout is the deadline of each call (default DefaultTimeout, as
	// sluice's default AdmissionCheck timeout).
	Timeout time.Duration
	// ReadyTimeout bounds how long Probe may answer ready=false before the
	// provider counts as never ready (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Workload replaces the sample workload sent with Evaluate. Its
	// namespace, name and uid are filled in when empty.
	Workload *checksv1.Workload
}

// Outcome of one case.
type Outcome int

// Outcomes.
const (
	Passed Outcome = iota
	Failed
	Skipped
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "PASS"
	case Failed:
		return "FAIL"
	case Skipped:
		return "SKIP"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result of one case. Detail says why a case failed or was skipped.
type Result struct {
	Name    string
	Outcome Outcome
	Detail  string
	Elapsed time.Duration
}

// Dial connects to a provider the way sluice does: plaintext, pinging an
// idle connection every 30 seconds.
func Dial(target string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// Run runs every case as a subtest of t, against the provider behind conn.
func Run(t *testing.T, conn grpc.ClientConnInterface, opts Options) {
	t.Helper()
	s := newSuite(conn, opts)
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			r := s.run(t.Context(), c)
			switch r.Outcome {
			case Skipped:
				t.Skip(r.Detail)
			case Failed:
				t.Fatal(r.Detail)
			}
		})
	}
}

// RunAll runs every case in order and returns their results.
func RunAll(ctx context.Context, conn grpc.ClientConnInterface, opts Options) []Result {
	s := newSuite(conn, opts)
	var results []Result
	for _, c := range cases() {
		results = append(results, s.run(ctx, c))
	}
	return results
}

// CaseNames lists the cases in the order they run.
func CaseNames() []string {
	var names []string
	for _, c := range cases() {
		names = append(names, c.name)
	}
	return names
}

// skip marks a case that does not apply to the provider.
type skip string

func (s skip) Error() string { return string(s) }

type testCase struct {
	name string
	run  func(ctx context.Context, s *suite) error
}

// suite holds the clients and what earlier cases learned.
type suite struct {
	opts     Options
	identity checksv1.IdentityServiceClient
	checks   checksv1.CheckServiceClient
	health   healthpb.HealthClient
	runID    string
	created  time.Time

	info  *checksv1.GetProviderInfoResponse // first GetProviderInfo answer, valid or not
	first *checksv1.EvaluateResponse        // answer to request("a")
}

func newSuite(conn grpc.ClientConnInterface, opts Options) *suite {
	if opts.CheckName == "" {
		opts.CheckName = DefaultCheckName
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	return &suite{
		opts:     opts,
		identity: checksv1.NewIdentityServiceClient(conn),
		checks:   checksv1.NewCheckServiceClient(conn),
		health:   healthpb.NewHealthClient(conn),
		runID:    randomHex(5),
		created:  time.Now().Truncate(time.Second),
	}
}

func (s *suite) run(ctx context.Context, c testCase) Result {
	start := time.Now()
	err := c.run(ctx, s)
	r := Result{Name: c.name, Outcome: Passed, Elapsed: time.Since(start)}
	var sk skip
	switch {
	case errors.As(err, &sk):
		r.Outcome, r.Detail = Skipped, sk.Error()
	case err != nil:
		r.Outcome, r.Detail = Failed, err.Error()
	}
	return r
}

func (s *suite) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}

func (s *suite) caps() []checksv1.Capability { return s.info.GetCapabilities() }

func (s *suite) has(c checksv1.Capability) bool { return slices.Contains(s.caps(), c) }

// workload is the sample workload, or Options.Workload, with the given
// pod sets (none: keep the template's).
func (s *suite) workload(podSets ...string) *checksv1.Workload {
	w := &checksv1.Workload{
		Namespace:         "conformance",
		Name:              "pod-sample-" + s.runID,
		Uid:               "c0f0" + s.runID + "-0000-4000-8000-000000000001",
		QueueName:         "user-queue",
		ClusterQueue:      "cluster-queue",
		Priority:          100,
		PriorityClassName: "high-priority",
		CreateTime:        timestamppb.New(s.created),
		PodSets:           []*checksv1.PodSet{samplePodSet("main", 1)},
	}
	if s.opts.Workload != nil {
		t := proto.Clone(s.opts.Workload).(*checksv1.Workload)
		if t.GetNamespace() == "" {
			t.Namespace = w.Namespace
		}
		if t.GetName() == "" {
			t.Name = w.Name
		}
		if t.GetUid() == "" {
			t.Uid = w.Uid
		}
		w = t
	}
	if len(podSets) > 0 {
		w.PodSets = nil
		for i, n := range podSets {
			w.PodSets = append(w.PodSets, samplePodSet(n, int32(i+1)))
		}
	}
	return w
}

func samplePodSet(name string, count int32) *checksv1.PodSet {
	return &checksv1.PodSet{
		Name:         name,
		Count:        count,
		Requests:     map[string]string{"cpu": "500m", "memory": "1Gi"},
		Flavors:      map[string]string{"cpu": "default-flavor", "memory": "default-flavor"},
		NodeSelector: map[string]string{"kubernetes.io/arch": "amd64"},
		Labels:       map[string]string{"app": "sample", "kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/managed": "true"},
		Annotations:  map[string]string{"kueue.x-k8s.io/role-hash": "a1b2c3d4"},
	}
}

// request is an Evaluate request for reservation res of the workload.
func (s *suite) request(res string, podSets ...string) *checksv1.EvaluateRequest {
	w := s.workload(podSets...)
	return &checksv1.EvaluateRequest{
		CheckName:     s.opts.CheckName,
		Parameters:    s.opts.Parameters,
		EvaluationKey: w.GetUid() + "/" + res,
		Workload:      w,
	}
}

func (s *suite) release(req *checksv1.EvaluateRequest, reason checksv1.ReleaseReason) *checksv1.ReleaseRequest {
	return &checksv1.ReleaseRequest{
		CheckName:     req.GetCheckName(),
		Parameters:    req.GetParameters(),
		EvaluationKey: req.GetEvaluationKey(),
		Namespace:     req.GetWorkload().GetNamespace(),
		Name:          req.GetWorkload().GetName(),
		Uid:           req.GetWorkload().GetUid(),
		Reason:        reason,
	}
}

// evaluate calls Evaluate and checks the answer against the contract.
func (s *suite) evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.checks.Evaluate(cctx, req)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, fmt.Errorf("Evaluate of a valid request failed: %w (if the provider needs parameters, pass them: Options.Parameters or --parameters)", err)
		}
		return nil, fmt.Errorf("Evaluate of a valid request failed: %w", err)
	}
	if err := checkvalidate.EvaluateResponse(req, resp, s.caps()); err != nil {
		return nil, fmt.Errorf("Evaluate answer breaks the contract: %w", err)
	}
	return resp, nil
}

func (s *suite) releaseCall(ctx context.Context, req *checksv1.ReleaseRequest) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.checks.Release(cctx, req)
	return err
}

func wantInvalidArgument(err error, what string) error {
	if code := status.Code(err); code != codes.InvalidArgument {
		return fmt.Errorf("%s: got %s (%v), want INVALID_ARGUMENT", what, code, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		return "00000"[:n]
	}
	return hex.EncodeToString(b)[:n]
}
