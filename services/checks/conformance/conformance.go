package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
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
	// DefaultKeepaliveTime is how often sluice's admitter pings an idle
	// provider connection.
	DefaultKeepaliveTime = 30 * time.Second
)

// keepaliveTimeout is how long sluice waits for a ping's answer before it
// drops the connection.
const keepaliveTimeout = 10 * time.Second

// Options say how to call the provider.
type Options struct {
	// CheckName is sent as check_name (default DefaultCheckName).
	// Evaluate/TwoChecksOneProvider also sends CheckName+"-second".
	CheckName string
	// Parameters are sent as the AdmissionCheck's parameters; give what
	// your provider needs to answer.
	Parameters *structpb.Struct
	// Timeout is the deadline of each call (default DefaultTimeout, as
	// sluice's default AdmissionCheck timeout). It also bounds how long a
	// fixture's PENDING answer is asked again (see Fixture).
	Timeout time.Duration
	// ReadyTimeout bounds how long Probe may answer ready=false before the
	// provider counts as never ready (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Workload replaces the sample workload sent with Evaluate. Its
	// namespace, name and uid are filled in when empty.
	Workload *checksv1.Workload
	// Fixtures are requests with the answers they must get, one case
	// each, named "Fixture/<name>". See Fixture and ParseFixtures.
	Fixtures []Fixture
	// KeepaliveSoak is how long Keepalive/Soak holds an idle connection
	// open; 0 skips the case. To catch grpc-go's default enforcement
	// policy, which closes the connection at the third idle ping, it must
	// outlast three pings: with sluice's 30s, 100s or more.
	KeepaliveSoak time.Duration
	// KeepaliveTime is how often the soak's connection pings while idle
	// (default DefaultKeepaliveTime, sluice's). grpc-go clients raise
	// anything under 10s to 10s.
	KeepaliveTime time.Duration
	// WatchIdle is how long WatchChanges/Open holds the stream open before
	// it passes (default DefaultWatchIdle).
	WatchIdle time.Duration
	// TriggerChange makes the provider change its answer for an
	// evaluation key the kit sent (for example by cutting a budget in a
	// test backend), for WatchChanges/PushedKeys; nil skips that case.
	// The provider must then push the key on its WatchChanges stream.
	TriggerChange func(ctx context.Context, evaluationKey string) error
	// Credentials secure the connection Keepalive/Soak dials of its own:
	// give the ones conn was dialled with (DialCredentials). Nil dials
	// plaintext, as Dial does.
	Credentials credentials.TransportCredentials
}

// Outcome of one case.
type Outcome int

// Outcomes. Warned is a case whose rule came with a later contract
// revision than the provider declares, and which the provider breaks: a
// released contract never fails a provider written against it, so the
// case is reported without failing the run.
const (
	Passed Outcome = iota
	Failed
	Skipped
	Warned
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "PASS"
	case Failed:
		return "FAIL"
	case Skipped:
		return "SKIP"
	case Warned:
		return "WARN"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result of one case. Detail says why a case failed, was skipped or
// warned; a warning's detail names the revision of the rule broken and
// how to have it enforced.
type Result struct {
	Name    string
	Outcome Outcome
	Detail  string
	Elapsed time.Duration
}

// Dial connects to a provider the way sluice does to an AdmissionCheck
// without spec.tls: plaintext, pinging an idle connection every 30
// seconds, with or without calls in flight.
func Dial(target string) (*grpc.ClientConn, error) {
	return dial(target, DefaultKeepaliveTime, nil)
}

// DialCredentials is Dial over creds, for a provider that serves TLS: as
// sluice does for an AdmissionCheck with spec.tls, dial with
// mtls.Files{CAFile: ...}.TLSClientCredentials(serverName), and add
// CertFile and KeyFile for mutual TLS. Give Options.Credentials the same
// creds. Nil creds dial plaintext.
func DialCredentials(target string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	return dial(target, DefaultKeepaliveTime, creds)
}

// dial is DialCredentials with another ping interval and more options.
func dial(target string, keepaliveTime time.Duration, creds credentials.TransportCredentials, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
	}, extra...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// Run runs every case as a subtest of t, against the provider behind conn.
// If the kit cannot connect to the provider, it fails t with the reason
// and runs no case.
func Run(t *testing.T, conn grpc.ClientConnInterface, opts Options) {
	t.Helper()
	s := newSuite(conn, opts)
	defer s.closeWatch()
	if err := s.connect(t.Context()); err != nil {
		t.Fatalf("%s: %v", connectCase, err)
	}
	for _, c := range s.cases() {
		t.Run(c.name, func(t *testing.T) {
			r := s.run(t.Context(), c)
			switch r.Outcome {
			case Skipped:
				t.Skip(r.Detail)
			case Failed:
				t.Fatal(r.Detail)
			case Warned:
				t.Log("WARN: " + r.Detail)
			}
		})
	}
}

// RunAll runs every case in order and returns their results.
func RunAll(ctx context.Context, conn grpc.ClientConnInterface, opts Options) []Result {
	return slices.Collect(Results(ctx, conn, opts))
}

// Results runs the cases in order and yields each result as its case
// ends; stopping the range stops the run. If the kit cannot connect to the
// provider, the only result is a failed case named Connect that says why.
func Results(ctx context.Context, conn grpc.ClientConnInterface, opts Options) iter.Seq[Result] {
	return func(yield func(Result) bool) {
		s := newSuite(conn, opts)
		defer s.closeWatch()
		connect := testCase{connectCase, 1, func(ctx context.Context, s *suite) error { return s.connect(ctx) }}
		if r := s.run(ctx, connect); r.Outcome == Failed {
			yield(r)
			return
		}
		for _, c := range s.cases() {
			if !yield(s.run(ctx, c)) {
				return
			}
		}
	}
}

// CaseNames lists the cases in the order they run, with one case for each
// of the fixtures.
func CaseNames(fixtures ...Fixture) []string {
	var names []string
	for _, c := range cases(fixtures) {
		names = append(names, c.name)
	}
	return names
}

// skip marks a case that does not apply to the provider.
type skip string

func (s skip) Error() string { return string(s) }

// testCase is one case. revision is the contract revision that brought
// its rule: a provider that declares an earlier one is warned, not failed,
// when it breaks the rule. Cases that hold every provider (the answer
// syntax, the fixtures, the rules of a capability it declares) are of
// revision 1.
type testCase struct {
	name     string
	revision int
	run      func(ctx context.Context, s *suite) error
}

// everyRevision marks the failure of a rule of every revision inside a
// case of a later one: an answer that breaks the syntax the admitter checks
// on every answer (pkg/checkvalidate) does not work with sluice, whatever
// revision the provider declares, so it fails the case anyway.
type everyRevision struct{ err error }

func (e everyRevision) Error() string { return e.err.Error() }
func (e everyRevision) Unwrap() error { return e.err }

// latestRevision is the latest contract revision the kit knows: the
// highest value of the generated ContractRevision enum.
func latestRevision() int {
	latest := 1
	for n := range checksv1.ContractRevision_name {
		latest = max(latest, int(n))
	}
	return latest
}

// revision is the contract revision the provider declares, as the caller
// reads it: unset (or no answer to GetProviderInfo) is 1, and a revision
// later than the kit knows counts as the latest it knows.
func (s *suite) revision() int {
	r := int(s.info.GetContractRevision())
	if r < 1 {
		return 1
	}
	return min(r, latestRevision())
}

// declared says which revision the provider declares, for warnings.
func (s *suite) declared() string {
	if s.info.GetContractRevision() == checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED {
		return "revision 1 (contract_revision unset)"
	}
	return fmt.Sprintf("revision %d (%s)", s.revision(), s.info.GetContractRevision())
}

// suite holds the clients and what earlier cases learned.
type suite struct {
	opts     Options
	conn     grpc.ClientConnInterface
	identity checksv1.IdentityServiceClient
	checks   checksv1.CheckServiceClient
	runID    string
	created  time.Time

	reservations map[string]string // reservation ids by the cases' labels
	sent         map[string]bool   // evaluation keys of the valid Evaluate requests sent

	info  *checksv1.GetProviderInfoResponse // first GetProviderInfo answer, valid or not
	first *checksv1.EvaluateResponse        // answer to request("reservation-a")
	watch *watchStream                      // opened by WatchChanges/Open
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
	if opts.KeepaliveTime <= 0 {
		opts.KeepaliveTime = DefaultKeepaliveTime
	}
	if opts.WatchIdle <= 0 {
		opts.WatchIdle = DefaultWatchIdle
	}
	return &suite{
		opts:         opts,
		conn:         conn,
		identity:     checksv1.NewIdentityServiceClient(conn),
		checks:       checksv1.NewCheckServiceClient(conn),
		runID:        randomHex(5),
		created:      time.Now().Truncate(time.Second),
		reservations: map[string]string{},
		sent:         map[string]bool{},
	}
}

func (s *suite) cases() []testCase { return cases(s.opts.Fixtures) }

func (s *suite) run(ctx context.Context, c testCase) Result {
	start := time.Now()
	err := c.run(ctx, s)
	r := Result{Name: c.name, Outcome: Passed, Elapsed: time.Since(start)}
	var sk skip
	switch {
	case errors.As(err, &sk):
		r.Outcome, r.Detail = Skipped, sk.Error()
	case err != nil && c.revision > s.revision() && !errors.As(err, new(everyRevision)):
		r.Outcome = Warned
		r.Detail = fmt.Sprintf("%v [a rule of contract revision %d, and the provider declares %s: declare contract_revision %s (with the SDK, sdk.Info.ContractRevision) to have it enforced]",
			err, c.revision, s.declared(), checksv1.ContractRevision(c.revision))
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
	w := s.fill(s.opts.Workload)
	if len(podSets) > 0 {
		w.PodSets = nil
		for i, n := range podSets {
			w.PodSets = append(w.PodSets, samplePodSet(n, int32(i+1)))
		}
	}
	return w
}

// fill returns a copy of template with its namespace, name and uid filled
// in from the sample workload when empty; a nil template is the sample.
func (s *suite) fill(template *checksv1.Workload) *checksv1.Workload {
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
	if template == nil {
		return w
	}
	t := proto.Clone(template).(*checksv1.Workload)
	if t.GetNamespace() == "" {
		t.Namespace = w.Namespace
	}
	if t.GetName() == "" {
		t.Name = w.Name
	}
	if t.GetUid() == "" {
		t.Uid = w.Uid
	}
	return t
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

// reservation returns the reservation id the cases call label: random, as
// sluice's are, and the same for the whole run.
func (s *suite) reservation(label string) string {
	id, ok := s.reservations[label]
	if !ok {
		id = randomHex(16)
		s.reservations[label] = id
	}
	return id
}

// evaluationKey is the key sluice sends for one check's evaluation of one
// reservation: "<workload uid>/<reservation id>/<check name>".
func (s *suite) evaluationKey(w *checksv1.Workload, res, check string) string {
	return w.GetUid() + "/" + s.reservation(res) + "/" + check
}

// request is an Evaluate request of the configured check for reservation
// res of the workload.
func (s *suite) request(res string, podSets ...string) *checksv1.EvaluateRequest {
	return s.requestFor(s.opts.CheckName, res, podSets...)
}

// requestFor is request for another check name, with the same parameters.
func (s *suite) requestFor(check, res string, podSets ...string) *checksv1.EvaluateRequest {
	w := s.workload(podSets...)
	return &checksv1.EvaluateRequest{
		CheckName:     check,
		Parameters:    s.opts.Parameters,
		EvaluationKey: s.evaluationKey(w, res, check),
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
	s.sent[req.GetEvaluationKey()] = true
	resp, err := s.checks.Evaluate(cctx, req)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, fmt.Errorf("Evaluate of a valid request failed: %w (if the provider needs parameters, pass them: Options.Parameters or --parameters)", err)
		}
		return nil, fmt.Errorf("Evaluate of a valid request failed: %w", err)
	}
	if err := checkvalidate.EvaluateResponse(req, resp, s.caps()); err != nil {
		return nil, everyRevision{fmt.Errorf("Evaluate answer breaks the contract: %w", err)}
	}
	return resp, nil
}

func (s *suite) releaseCall(ctx context.Context, req *checksv1.ReleaseRequest) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.checks.Release(cctx, req)
	return err
}

// wantInvalidArgument judges the answer to a malformed request: the
// contract requires INVALID_ARGUMENT.
func wantInvalidArgument(err error, what string) error {
	if err == nil {
		return fmt.Errorf("%s was answered; want INVALID_ARGUMENT naming the field (the contract's request rules)", what)
	}
	if code := status.Code(err); code != codes.InvalidArgument {
		return fmt.Errorf("%s: got %s (%v), want INVALID_ARGUMENT", what, codeName(code), err)
	}
	return nil
}

// codeName is a gRPC code as the contract and the fixtures write it, such
// as INVALID_ARGUMENT.
func codeName(c codes.Code) string {
	var b strings.Builder
	name := c.String()
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' && name[i-1] >= 'a' && name[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		return strings.Repeat("0", n)
	}
	return hex.EncodeToString(b)[:n]
}
